"""Fault tolerance of the startup hook, on the CPU (offline sm_90 target)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _subproc import (
    ROOT,
    binary_path,
    child_env,
    cli_json,
    entry_files,
    fake_other_toolchain,
    full_disk_under,
    last_json,
    python,
    try_readonly_bind,
)

pytestmark = pytest.mark.slow

WARMUP = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING)
{prelude}
import qsa_warmup
r = qsa_warmup.warmup("tiny", cache_dir={root!r}, target="sm_90", {kwargs})
print(json.dumps({{"planned": r.planned, "loaded": r.loaded, "compiled": r.compiled,
                  "rebuilt": r.rebuilt,
                  "warnings": r.warnings}}))
"""


def run_warmup(root, prelude="", kwargs="", env=None):
    p = python(WARMUP.format(root=root, prelude=prelude, kwargs=kwargs), env=env)
    return last_json(p), p.stderr


@pytest.fixture(scope="module")
def built(tiny_cache, tmp_path_factory):
    """This module's copy of the suite's tiny cache; tests that damage it work on copies."""
    return shutil.copytree(tiny_cache, str(tmp_path_factory.mktemp("cache") / "c"))


def copy_of(src, tmp_path, name="copy"):
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


VICTIM = "prefill.bf16.tr64.w8"


def test_warm_start_loads_everything_and_compiles_nothing(built, tmp_path):
    report, _ = run_warmup(copy_of(built, tmp_path))
    assert report == {"planned": 5, "loaded": 5, "compiled": 0, "rebuilt": [], "warnings": []}


def test_warm_start_after_prebuild_skips_tritons_binder(built, tmp_path):
    # prebuild memoized the plan with each launch's binding: a fresh process loads every spec
    # without Triton's binder, whose first call imports triton.experimental.gluon (~80 ms on the
    # H200); the kernels land under the keys Triton's binder computes (checked in
    # test_offline_compile.py)
    p = python(f"""
        import json, sys
        import qsa_warmup
        r = qsa_warmup.warmup("tiny", cache_dir={copy_of(built, tmp_path)!r}, target="sm_90")
        print(json.dumps({{"loaded": r.loaded, "compiled": r.compiled,
                           "gluon": "triton.experimental.gluon" in sys.modules}}))
    """)
    assert last_json(p) == {"loaded": 5, "compiled": 0, "gluon": False}


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_binary_is_rebuilt_never_loaded(built, tmp_path, damage):
    root = copy_of(built, tmp_path)
    binary = binary_path(root, VICTIM)
    with open(binary, "r+b") as f:
        if damage == "truncate":
            f.truncate(100)
        else:
            f.seek(os.path.getsize(binary) - 50)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))
    report, _ = run_warmup(root)
    assert [r[0] for r in report["rebuilt"]] == [VICTIM] and "checksum" in report["rebuilt"][0][1]
    assert report["compiled"] == 1 and report["loaded"] == 5
    assert (
        cli_json("check", "--preset", "tiny", "--cache-dir", root)["ok"] == 5
    )  # repaired on disk too


def test_readonly_cache_loads_and_compiles_missing_into_overlay(built, tmp_path):
    src = copy_of(built, tmp_path)
    os.unlink(entry_files(src, VICTIM)[0])
    ro = str(tmp_path / "ro")
    if not try_readonly_bind(src, ro):
        pytest.skip("bind mounts are not permitted here")
    try:
        env = child_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
        report, _ = run_warmup(ro, env=env)
        assert report["planned"] == 5 and report["loaded"] == 5 and report["compiled"] == 1
        assert any("read-only" in w for w in report["warnings"])
        overlay_entries = [
            f for _, _, fs in os.walk(tmp_path / "xdg") for f in fs if f == f"{VICTIM}.json"
        ]
        assert overlay_entries == [
            f"{VICTIM}.json"
        ]  # built into this user's overlay, verified like any entry
        # second start: the overlay now holds the missing spec
        again, _ = run_warmup(ro, env=env)
        assert again["compiled"] == 0 and again["loaded"] == 5
    finally:
        subprocess.run(["umount", ro])


def test_disk_full_keeps_kernels_in_memory(tmp_path):
    root = str(tmp_path / "full")
    report, _ = run_warmup(root, prelude=full_disk_under(root), kwargs="jobs=1")
    assert report["planned"] == 5 and report["loaded"] + report["compiled"] >= 5
    assert any(
        "No space left" in w or "cannot write" in w or "failed" in w for w in report["warnings"]
    )
    # nothing partial is visible in the cache: check says missing, never corrupt
    out = cli_json("check", "--preset", "tiny", "--cache-dir", root, expect=1)
    assert {f["state"] for f in out["failing"]} == {"missing"}


def test_held_lock_times_out_naming_the_file(built, tmp_path):
    import filelock

    root = copy_of(built, tmp_path)
    path, entry = entry_files(root, VICTIM)
    os.unlink(path)
    plan = cli_json("plan", "--preset", "tiny")
    digest = next(s["key_digest"] for s in plan["specs"] if s["id"] == VICTIM)
    lock_file = os.path.join(root, "locks", f"{digest}.lock")
    with filelock.FileLock(lock_file):
        start = time.monotonic()
        report, stderr = run_warmup(root, kwargs="timeout=1")
        assert time.monotonic() - start < 60
    assert report["loaded"] == 5
    assert lock_file in stderr


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_kill_mid_build_leaves_no_partial_entry(tmp_path, sig):
    root = str(tmp_path / "killed")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qsa_warmup",
            "prebuild",
            "--preset",
            "tiny",
            "--cache-dir",
            root,
            "--jobs",
            "1",
        ],
        env=child_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    entries = os.path.join(root, "qsa")
    while time.monotonic() < deadline:  # kill once the first entry landed, mid-way through the rest
        if os.path.isdir(entries) and any(
            f.endswith(".json")
            for _, _, fs in os.walk(entries)
            for f in fs
            if not f.startswith("manifest")
        ):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, sig)  # SIGINT: Ctrl-C at a terminal reaches the whole process group
    proc.wait()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "qsa_warmup",
            "check",
            "--preset",
            "tiny",
            "--cache-dir",
            root,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
    )
    out = json.loads(p.stdout)
    assert out["ok"] >= 1 and {f["state"] for f in out["failing"]} <= {"missing"}
    # the killed process's locks are released by the kernel: the next start does not hang
    report, _ = run_warmup(root, kwargs="timeout=30")
    assert report["loaded"] == 5 and report["compiled"] == len(out["failing"])


def test_toolchain_change_is_reported_and_rebuilt(built, tmp_path):
    root = copy_of(built, tmp_path)
    fake_other_toolchain(root, "ptxas", "Build cuda_11.0")
    report, _ = run_warmup(root)
    assert len(report["rebuilt"]) == 5
    assert all(r[1].startswith("stale: ptxas Build cuda_11.0 vs") for r in report["rebuilt"])
    assert report["loaded"] == 5


def test_malformed_config_names_the_field():
    from qsa_warmup.errors import ConfigError
    from qsa_warmup.qsa.config import PRESETS, DeploymentConfig

    with pytest.raises(ConfigError) as err:
        DeploymentConfig.from_dict({**PRESETS["tiny"], "page_size": -1})
    assert err.value.field == "page_size" and isinstance(err.value, ValueError)
    p = python("import qsa_warmup; qsa_warmup.warmup({'num_heads': 4})", check=False)
    assert p.returncode != 0 and "ConfigError" in p.stderr and "head_dim" in p.stderr


STRICT = """
import json, logging
logging.basicConfig(level=logging.WARNING)
import torch, qsa_warmup, kernels
from kernels import TensorMeta
from qsa_warmup import triton_compat as tc
from qsa_warmup.errors import StrictModeError
r = qsa_warmup.warmup("tiny", cache_dir={root!r}, target="sm_90", strict={mode!r})
planned = kernels.ragged_topk_launch(TensorMeta((2, 128), torch.float32),
                                     TensorMeta((2,), torch.int32, misalign=4),
                                     16, TensorMeta((2, 16), torch.int32, misalign=4))
unplanned = kernels.ragged_topk_launch(TensorMeta((2, 3000), torch.float32),
                                       TensorMeta((2,), torch.int32),
                                       16, TensorMeta((2, 16), torch.int32))
with tc.active_driver(tc.parse_target("sm_90")):
    planned.warmup()  # in memory after warmup: no compile request at all
    try:
        unplanned.warmup()
        outcome = "compiled"
    except StrictModeError as exc:
        outcome = "raised: " + str(exc)
print(json.dumps({{"outcome": outcome}}))
"""


@pytest.mark.parametrize("mode", ["error", "warn", "off"])
def test_strict_mode(built, tmp_path, mode):
    p = python(STRICT.format(root=copy_of(built, tmp_path), mode=mode))
    outcome = last_json(p)["outcome"]
    if mode == "error":
        assert outcome.startswith("raised: JIT compile after warmup: _ragged_topk_kernel")
        assert "closest planned: topk.single.b1024.w4" in outcome
    else:
        assert outcome == "compiled"
        assert ("JIT compile after warmup" in p.stderr) == (mode == "warn")


def test_second_call_is_nearly_free(built, tmp_path):
    p = python(f"""
        import json, time, qsa_warmup
        a = qsa_warmup.warmup("tiny", cache_dir={copy_of(built, tmp_path)!r}, target="sm_90")
        t = time.perf_counter()
        b = qsa_warmup.warmup("tiny",
                              cache_dir={copy_of(built, tmp_path, "c2")!r}.replace('c2', 'copy'),
                              target="sm_90")
        ms = (time.perf_counter() - t) * 1e3
        print(json.dumps({{"repeat": b.repeat, "ms": ms, "first": a.loaded}}))
    """)
    out = last_json(p)
    assert out["repeat"] is True and out["first"] == 5 and out["ms"] < 50


def test_cuda_process_builds_in_a_child_process(tmp_path):
    # a serving process with CUDA initialized must not fork a pool: the hook runs the CLI instead
    root = str(tmp_path / "child")
    report, _ = run_warmup(
        root, prelude="import qsa_warmup.hook as h; h._cuda_initialized = lambda: True"
    )
    assert report["planned"] == 5 and report["compiled"] == 5 and report["loaded"] == 5
    assert cli_json("check", "--preset", "tiny", "--cache-dir", root)["ok"] == 5


def test_strict_error_names_the_closest_planned_spec(built, tmp_path):
    # tiny plans decode dql1/tpp2 and dql2/tpp2; a dql1 launch with 1 tile a program is
    # one constant away from the first and several from the second
    p = python(f"""
        import dataclasses, json, torch, qsa_warmup, kernels
        from kernels import TensorMeta as M
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.errors import StrictModeError
        qsa_warmup.warmup("tiny", cache_dir={copy_of(built, tmp_path)!r}, target="sm_90",
                          strict="error")
        base = kernels.decode_launch_config(torch.bfloat16, 4, 64, 1, 3, 128)
        launch = kernels.decode_scores_launch(M((3, 4, 64), torch.bfloat16),
                                              M((1, 16, 1, 64), torch.bfloat16),
                                              M((3, 8), torch.int32), M((3,), torch.int32),
                                              M((3, 128), torch.float32), 1,
                                              config=dataclasses.replace(base, tiles_per_program=1))
        with tc.active_driver(tc.parse_target("sm_90")):
            try:
                launch.warmup()
                print(json.dumps({{"closest": None}}))
            except StrictModeError as exc:
                print(json.dumps({{"closest": exc.closest, "text": str(exc)}}))
    """)
    out = last_json(p)
    assert out["closest"] == "decode.bf16.dql1.qg1.n128.s1.tpp2.w4", out
    assert "TILES_PER_PROG" in out["text"]
