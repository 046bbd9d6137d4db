"""File helpers every cache write and lock goes through.

- :func:`atomic_write`: a temp file in the destination's folder, fsynced, then ``os.replace``,
  so a reader sees the old file or the new one, never a part. The file gets the mode a plain
  ``open()`` would give it (0666 under the process umask: 0644 by default), so a cache built by
  one user (an image build as root) is readable by every user who can read its folder.
- :func:`held_lock`: a cross-process file lock with a timeout after which the caller goes on
  without it (compile-once saves work; correctness never depends on the lock).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import tempfile
from typing import Callable, Iterator

__all__ = [
    "atomic_write",
    "atomic_write_json",
    "read_json",
    "UNREADABLE",
    "sha256_bytes",
    "files_digest",
    "held_lock",
    "file_mode",
    "can_create_in",
    "checked_files",
]

log = logging.getLogger(__name__)

UNREADABLE = {
    "__unreadable__": True
}  # what read_json returns for a file that exists but does not decode


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    # /proc says it without changing it (os.umask would, for every thread, for a moment)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file in this process (0644 under umask 022)."""
    return 0o666 & ~_umask()


def atomic_write(path: str, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (creating its folder); raises OSError on failure
    and leaves no temp file behind. ``durable=False`` skips the fsync: for files whose every
    reader verifies a checksum first (what a crash could tear is then rebuilt, never loaded)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())  # mkstemp makes 0600: private to the builder
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, value, *, durable: bool = True) -> None:
    atomic_write(path, json.dumps(value, indent=1, sort_keys=True).encode(), durable=durable)


def read_json(path: str):
    """The decoded file; None if it does not exist (nor its folder); :data:`UNREADABLE` if it
    cannot be read or decoded (permissions, damage): the caller decides what that means."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return UNREADABLE


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_digest(paths, *, seed: bytes = b"") -> str:
    """16 hex digits of a sha256 over ``seed``, then each file's base name and bytes in the
    order given: the identity of the source files a computation depends on."""
    h = hashlib.sha256(seed)
    for path in paths:
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def held_lock(
    path: str, timeout: float, warn: Callable[[str], None] | None = None
) -> Iterator[bool]:
    """Hold the file lock at ``path`` (yields True), or, past ``timeout`` seconds or where no
    lock file can be made (a read-only folder), go on without it (yields False). The kernel
    releases a killed holder's lock (flock), so a crash never leaves a folder locked."""
    import filelock  # here, not at import: a warm start takes no lock, and the import costs ~15 ms

    lock = filelock.FileLock(path, timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        (warn or log.warning)(f"lock {path} held for over {timeout:.0f} s; going on without it")
        lock = None
    except OSError:
        lock = None
    try:
        yield lock is not None
    finally:
        if lock is not None:
            lock.release()


def can_create_in(folder: str) -> bool:
    """Whether this process can create a file in ``folder`` (os.access says nothing of
    read-only mounts for root: try it)."""
    try:
        fd, path = tempfile.mkstemp(prefix=".probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(path)
    return True


def checked_files(entry_dir: str, files: dict) -> tuple[str | None, dict]:
    """(None, {path: bytes}) when every file of ``files`` ({name: sha256}) in ``entry_dir``
    has its checksum, else (what is wrong, {})."""
    contents = {}
    for name, digest in files.items():
        path = os.path.join(entry_dir, os.path.basename(name))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return f"{name} missing", {}
        except OSError as exc:
            return f"{name} unreadable ({exc.strerror})", {}
        if sha256_bytes(data) != digest:
            return f"{name} checksum mismatch", {}
        contents[path] = data
    return None, contents
