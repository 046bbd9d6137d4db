"""A cache built by one user (an image build as root) serves every user who can read it."""

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from _subproc import ROOT, cli_json, entry_files, try_readonly_bind

pytestmark = pytest.mark.slow


def modes(root):
    files, dirs = set(), set()
    for base, names, files_here in os.walk(root):
        dirs.update(stat.S_IMODE(os.stat(os.path.join(base, n)).st_mode) for n in names)
        files.update(
            (stat.S_IMODE(os.stat(os.path.join(base, n)).st_mode), n.split("-")[0])
            for n in files_here
        )
    return files, dirs


def test_every_file_is_readable_by_all_under_umask_022(tmp_path):
    root = str(tmp_path / "c")
    old = os.umask(0o022)
    try:
        cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    finally:
        os.umask(old)
    files, dirs = modes(root)
    assert {m for m, _ in files} == {0o644}, sorted(
        files
    )  # manifests, entries, plans, memo, Triton's files
    assert dirs == {0o755}


@pytest.fixture(scope="module")
def nobody_python(tmp_path_factory):
    """(argv prefix, env) running this interpreter as the user nobody, or skip."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser")
    base = tempfile.mkdtemp(prefix="qsa-nobody-")
    os.chmod(base, 0o755)
    src = os.path.join(base, "src")
    for package in ("kernels", "qsa_warmup"):
        shutil.copytree(
            os.path.join(ROOT, package),
            os.path.join(src, package),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    subprocess.run(["chmod", "-R", "a+rX", src], check=True)
    prefix, python = sys.prefix, sys.executable
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "PYTHONPATH": src,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    probe = ["runuser", "-u", "nobody", "--", "test", "-x", python]
    mounted = None
    if (
        subprocess.run(probe).returncode != 0
    ):  # the interpreter lives where nobody cannot go (/root)
        mounted = os.path.join(base, "python")
        if not try_readonly_bind(prefix, mounted):
            pytest.skip(
                "the interpreter is not reachable by nobody and bind mounts are not permitted"
            )
        python = os.path.join(mounted, os.path.relpath(python, prefix))
        env["LD_LIBRARY_PATH"] = os.path.join(
            mounted, os.path.relpath(sysconfig.get_config_var("LIBDIR"), prefix)
        )
    argv = [
        "runuser",
        "-u",
        "nobody",
        "--",
        "env",
        "-i",
        *[f"{k}={v}" for k, v in env.items()],
        python,
    ]
    check = subprocess.run(
        [*argv, "-c", "import torch, triton, qsa_warmup"], capture_output=True, text=True
    )
    if check.returncode != 0:
        pytest.skip(f"this interpreter does not run as nobody: {check.stderr.strip()[-300:]}")
    yield argv, base
    if mounted:
        subprocess.run(["umount", mounted])
    shutil.rmtree(base, ignore_errors=True)


WARMUP = """
import json, logging
logging.basicConfig(level=logging.WARNING)
import qsa_warmup
r = qsa_warmup.warmup("tiny", cache_dir={root!r}, target="sm_90")
print(json.dumps({{"loaded": r.loaded, "compiled": r.compiled, "rebuilt": r.rebuilt,
                  "warnings": r.warnings}}))
"""


def snapshot(root):
    return {
        os.path.relpath(os.path.join(b, n), root): os.stat(os.path.join(b, n)).st_mtime_ns
        for b, _, names in os.walk(root)
        for n in names
    }


def as_nobody(nobody_python, *args):
    argv, _ = nobody_python
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=600, cwd="/")


def test_root_built_cache_serves_nobody(nobody_python, tmp_path):
    _, base = nobody_python
    root = os.path.join(base, "cache")
    old = os.umask(0o022)
    try:
        cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    finally:
        os.umask(old)
    before = snapshot(root)

    p = as_nobody(nobody_python, "-c", WARMUP.format(root=root))
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report == {"loaded": 5, "compiled": 0, "rebuilt": [], "warnings": []}, report
    p = as_nobody(
        nobody_python, "-m", "qsa_warmup", "check", "--preset", "tiny", "--cache-dir", root
    )
    assert p.returncode == 0, p.stdout + p.stderr
    p = as_nobody(
        nobody_python, "-m", "qsa_warmup", "prebuild", "--preset", "tiny", "--cache-dir", root
    )
    assert p.returncode == 0 and "read-only" in p.stderr and "Traceback" not in p.stderr, p.stderr

    # one spec gone: nobody compiles it into its own overlay; prebuild says the cache is read-only
    entry_path = entry_files(root, "expand.i32")[0]
    os.unlink(entry_path)
    p = as_nobody(nobody_python, "-c", WARMUP.format(root=root))
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert (
        report["loaded"] == 5
        and report["compiled"] == 1
        and [r[0] for r in report["rebuilt"]] == ["expand.i32"]
    )
    assert any("read-only" in w for w in report["warnings"]), report
    p = as_nobody(
        nobody_python, "-m", "qsa_warmup", "prebuild", "--preset", "tiny", "--cache-dir", root
    )
    assert (
        p.returncode == 2 and "read-only" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    ), p.stderr
    after = snapshot(root)
    del before[os.path.relpath(entry_path, root)]
    assert after == before  # nobody wrote nothing into root's cache
