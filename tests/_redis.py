"""A throwaway redis-server for the shared tier's tests (``SERVER`` is None where none is
installed; ``.ci/run`` installs Debian's)."""

import os
import shutil
import signal
import subprocess
import time

import redis

SERVER = shutil.which("redis-server") or (
    "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
)


class RedisServer:
    """A redis-server on a unix socket in a temp folder, without persistence."""

    def __init__(self, folder):
        self.sock = os.path.join(folder, "redis.sock")
        self.proc = subprocess.Popen(
            [SERVER, "--port", "0", "--unixsocket", self.sock, "--save", "", "--appendonly", "no"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = redis.Redis(unix_socket_path=self.sock)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def url(self, **params):
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"unix://{self.sock}" + (f"?{query}" if query else "")

    def keys(self, kind):
        return sorted(k.decode() for k in self.client.scan_iter(match=f"*:v1:{kind}:*"))

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
