"""Run qsa_warmup in a child process: the pytest process runs kernels in the interpreter,
warmup needs compiled-mode Triton."""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cli_argv(*args):
    return [sys.executable, "-m", "qsa_warmup", *map(str, args)]


def together(argvs, *, timeout=600):
    """Start every command at once (processes starting together, as ranks and hosts do);
    the JSON each printed (its whole stdout, else its last line), in order."""
    procs = [
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=ROOT,
        )
        for argv in argvs
    ]
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"exit {p.returncode}\n{out[-2000:]}\n{err[-3000:]}"
    return [_printed_json(out) for out, _ in outs]


def _printed_json(out):
    try:
        return json.loads(out)
    except ValueError:
        return json.loads(out.strip().splitlines()[-1])


def cli(*args, env=None, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "qsa_warmup", *map(str, args)],
        capture_output=True,
        text=True,
        env=env or child_env(),
        timeout=timeout,
        cwd=ROOT,
    )


def cli_json(*args, expect=0, **kw):
    p = cli(*args, "--json", **kw)
    assert p.returncode == expect, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout)


def python(code, *, env=None, timeout=600, check=True):
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env or child_env(),
        timeout=timeout,
        cwd=ROOT,
    )
    if check:
        assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def last_json(p):
    return json.loads(p.stdout.strip().splitlines()[-1])


def entry_files(cache_root, spec_id):
    """(entry json path, entry dict) of a spec in the only manifest of a cache."""
    qsa = os.path.join(cache_root, "qsa")
    (manifest,) = os.listdir(qsa)
    path = os.path.join(qsa, manifest, "entries", f"{spec_id}.json")
    with open(path) as f:
        return path, json.load(f)


def binary_path(cache_root, spec_id):
    _, entry = entry_files(cache_root, spec_id)
    name = next(n for n in entry["files"] if n.endswith(".cubin"))
    return os.path.join(cache_root, "triton", entry["folder"], name)


def try_readonly_bind(src, dst):
    """Bind-mount src read-only at dst (root only); False where mounts are not allowed."""
    os.makedirs(dst, exist_ok=True)
    ok = subprocess.run(["mount", "--bind", src, dst], capture_output=True).returncode == 0
    if (
        ok
        and subprocess.run(["mount", "-o", "remount,ro,bind", dst], capture_output=True).returncode
        == 0
    ):
        return True
    if ok:
        subprocess.run(["umount", dst])
    return False


def fake_other_toolchain(cache_root, part, value):
    """Make the cache's only manifest look built by another toolchain (``part`` = ``value``)."""
    qsa = os.path.join(cache_root, "qsa")
    (name,) = os.listdir(qsa)
    with open(os.path.join(qsa, name, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["fingerprint"][part] = value
    moved = os.path.join(qsa, name[:-16] + "0" * 16)
    os.rename(os.path.join(qsa, name), moved)
    with open(os.path.join(moved, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def full_disk_under(prefix: str) -> str:
    """Python source that makes every ``os.replace`` into ``prefix`` fail with ENOSPC (a full
    disk, as the cache's atomic writes meet it), for a child process to run first."""
    return f"""
import errno, os
_real_replace = os.replace
def _full(src, dst, *a, **k):
    if str(dst).startswith({prefix!r}):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))
    return _real_replace(src, dst, *a, **k)
os.replace = _full
"""
