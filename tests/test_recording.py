"""Recordings of kernels nobody declared: toy kernels recorded under the offline driver (CPU
tensors, nothing launched), then planned, built, checked, explained, exported, imported and
warmed up strictly; concurrent recorders, stale and unimportable kernels, other targets."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from _helpers import autotuned_module
from _subproc import ROOT, child_env, cli, cli_json, python

TOY = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scaled(x, factor: tl.constexpr):
    return x * factor


@triton.jit
def toy_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, FACTOR: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _scaled(tl.load(x_ptr + offs, mask=mask), FACTOR), mask=mask)


@triton.jit
def toy_add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def toy_scale(x, factor=2.0):
    out = torch.empty_like(x)
    block = 1024 if x.numel() > 512 else 256
    toy_scale_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block,
                                                     FACTOR=factor)
    return out


def toy_add(x):
    toy_add_kernel[(1,)](x, torch.empty_like(x), x.numel(), BLOCK=128)
"""

RUN = """
import sys
import torch
import toy_kernels
sizes = [int(s) for s in sys.argv[1:]] or [1, 100, 4096]
for n in sizes:
    toy_kernels.toy_scale(torch.randn(n))
toy_kernels.toy_add(torch.randn(64))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The toy kernels' module, a script that runs them, and its recording (rec.jsonl), made
    once for the module under the offline driver."""
    folder = tmp_path_factory.mktemp("toy")
    (folder / "toy_kernels.py").write_text(TOY)
    (folder / "run_toy.py").write_text(RUN)
    _record(folder, folder / "rec.jsonl")
    return folder


@pytest.fixture
def toy(recorded, tmp_path):
    """A copy of ``recorded`` of this test's own (its kernels may be edited)."""
    shutil.copytree(recorded, tmp_path, dirs_exist_ok=True)
    return tmp_path


def _env(toy, **extra):
    env = child_env(**extra)
    env["PYTHONPATH"] = f"{toy}{os.pathsep}{env['PYTHONPATH']}"
    return env


def _record(toy, out, *sizes, target="sm_90"):
    p = cli(
        "record",
        "--target",
        target,
        "--out",
        out,
        "--",
        sys.executable,
        toy / "run_toy.py",
        *sizes,
        env=_env(toy),
    )
    assert p.returncode == 0, p.stderr
    return p


def _lines(path):
    return [json.loads(line) for line in open(path).read().splitlines()]


def test_record_plan_prebuild_check_explain(toy):
    rec = toy / "fresh.jsonl"
    p = _record(toy, rec)
    requests = _lines(rec)
    # toy_scale at three sizes (n == 1, n % 16 != 0 with the small block, n % 16 == 0 with the
    # large one) and toy_add: four distinct keys
    assert len(requests) == 4, requests
    assert {r["qualname"] for r in requests} == {"toy_scale_kernel", "toy_add_kernel"}
    assert all(r["target"] == "sm_90" and r["format"] == "qsa-warmup-recording" for r in requests)
    assert "4 compile requests recorded" in p.stderr
    env, cache = _env(toy), toy / "cache"
    plan = cli_json("plan", "--recording", rec, env=env)
    assert len(plan["specs"]) == 4 and {s["family"] for s in plan["specs"]} == {"recorded"}
    built = cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    assert built["compiled"] == 4 and built["failed"] == 0
    again = cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    assert again["cached"] == 4 and again["compiled"] == 0
    assert cli_json("check", "--recording", rec, "--cache-dir", cache, env=env)["ok"] == 4
    spec = plan["specs"][0]["id"]
    explained = cli_json("explain", spec, "--recording", rec, "--cache-dir", cache, env=env)
    assert explained["state"] == "ok"
    # an entry damaged on disk: check fails naming it
    qsa = cache / "qsa"
    (manifest,) = os.listdir(qsa)
    (qsa / manifest / "entries" / f"{spec}.json").write_text("{")
    failed = cli_json("check", "--recording", rec, "--cache-dir", cache, env=env, expect=1)
    assert [f["spec"] for f in failed["failing"]] == [spec]


def test_overlapping_and_merged_recordings_compile_only_what_is_new(toy):
    # b shares three keys with the module's recording (n = 4096, a small n not a multiple of
    # 16, toy_add) and adds one (n = 5000: the large block, not a multiple of 16)
    rec_a, rec_b, merged = toy / "rec.jsonl", toy / "b.jsonl", toy / "ab.jsonl"
    _record(toy, rec_b, "4096", "5000", "3")
    merged.write_text(rec_a.read_text() + rec_b.read_text())
    env, cache = _env(toy), toy / "cache"
    assert (
        cli_json("prebuild", "--recording", rec_a, "--cache-dir", cache, env=env)["compiled"] == 4
    )
    built = cli_json("prebuild", "--recording", rec_b, "--cache-dir", cache, env=env)
    assert (built["compiled"], built["cached"]) == (1, 3)
    built = cli_json("prebuild", "--recording", merged, "--cache-dir", cache, env=env)
    assert (built["compiled"], built["cached"]) == (0, 5)
    assert cli_json("check", "--recording", merged, "--cache-dir", cache, env=env)["ok"] == 5
    # another manifest's entry whose files fail their checksums is not taken: rebuilt
    other = toy / "other"
    cli_json("prebuild", "--recording", rec_a, "--cache-dir", other, env=env)
    entries = [
        json.load(open(os.path.join(root, name)))
        for root, _, names in os.walk(other / "qsa")
        for name in names
        if root.endswith("entries")
    ]
    damaged = next(e for e in entries if e["kernel"].endswith("toy_add_kernel"))
    binary = next(n for n in damaged["files"] if n.endswith(".cubin"))
    with open(other / "triton" / damaged["folder"] / binary, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    built = cli_json("prebuild", "--recording", rec_b, "--cache-dir", other, env=env)
    assert (built["compiled"], built["cached"]) == (2, 2)
    assert cli_json("check", "--recording", rec_b, "--cache-dir", other, env=env)["ok"] == 4


def test_recording_export_import_and_strict_warmup(toy):
    rec, cache, other = toy / "rec.jsonl", toy / "cache", toy / "imported"
    env = _env(toy)
    cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    bundle = toy / "toy.bundle"
    p = cli("export", "--recording", rec, "--target", "sm_90", "--cache-dir", cache, "--out",
            bundle, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    p = cli("import", bundle, "--cache-dir", other, env=env)
    assert p.returncode == 0, p.stderr
    assert cli_json("check", "--recording", rec, "--cache-dir", other, env=env)["ok"] == 4
    # a strict warmup from the imported cache loads every recorded variant and refuses one
    # that was not recorded (FACTOR=3.0) before it compiles
    out = python(
        f"""
        import json, torch, qsa_warmup
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.errors import StrictModeError
        report = qsa_warmup.warmup(recordings={str(rec)!r}, target="sm_90",
                                   cache_dir={str(other)!r}, strict="error")
        import toy_kernels
        refused = None
        with tc.active_driver(tc.parse_target("sm_90")):
            try:
                toy_kernels.toy_scale_kernel[(1,)](torch.randn(5), torch.randn(5), 5, BLOCK=256,
                                                   FACTOR=3.0)
            except StrictModeError as exc:
                refused = str(exc)
        print(json.dumps(dict(loaded=report.loaded, compiled=report.compiled,
                              planned=report.planned, refused=refused)))
        """,
        env=env,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["planned"] == 4 and got["loaded"] == 4 and got["compiled"] == 0, got
    assert got["refused"] and "toy_scale_kernel" in got["refused"] and "3.0" in got["refused"]


def test_a_recording_goes_through_the_shared_tier(toy):
    """One host builds a recording and publishes it; a new host, with an empty folder, warms
    up from the same recording through the tier: every variant fetched, none compiled."""
    if importlib.util.find_spec("redis") is None:
        pytest.skip("the redis client is not installed (.ci/run installs it)")
    from _redis import SERVER, RedisServer

    if SERVER is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    server = RedisServer(str(toy))
    try:
        rec, env = toy / "rec.jsonl", _env(toy)
        built = cli_json("prebuild", "--recording", rec, "--cache-dir", toy / "a",
                         "--remote", server.url(), env=env)  # fmt: skip
        assert (built["compiled"], built["remote"]["published"]) == (4, 4), built
        out = python(
            f"""
            import json, qsa_warmup
            r = qsa_warmup.warmup(recordings={str(rec)!r}, target="sm_90", jobs=1,
                                  cache_dir={str(toy / "b")!r}, remote={server.url()!r})
            print(json.dumps(dict(loaded=r.loaded, compiled=r.compiled, fetched=r.fetched)))
            """,
            env=env,
        )
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got == {"loaded": 4, "compiled": 0, "fetched": 4}, got
        # copied down: the new host's folder alone now holds the recording
        assert cli_json("check", "--recording", rec, "--cache-dir", toy / "b", env=env)["ok"] == 4
    finally:
        server.kill()


def test_two_processes_recording_into_one_file_lose_nothing(toy):
    rec = toy / "two.jsonl"
    sizes = [[str(n) for n in range(start, 1024, 2)] for start in (1, 2)]
    env = _env(toy)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "qsa_warmup",
                "record",
                "--target",
                "sm_90",
                "--out",
                rec,
                "--",
                sys.executable,
                toy / "run_toy.py",
                *s,
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for s in sizes
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    written = _lines(rec)  # every line whole
    keys = {(r["qualname"], r["key"]) for r in written}
    # odd sizes: n == 1 and the not-divisible class; even: both blocks, divisible or not
    alone = toy / "alone.jsonl"
    for s in sizes:
        _record(toy, alone, *s)
    assert keys == {(r["qualname"], r["key"]) for r in _lines(alone)}
    assert len(written) == sum(1 for _ in open(rec))
    assert len(written) == len(_lines(toy / "alone.jsonl"))


def test_stale_and_unimportable_recordings_are_refused_by_name(toy):
    rec = toy / "rec.jsonl"
    source = (toy / "toy_kernels.py").read_text()
    (toy / "toy_kernels.py").write_text(source.replace("+ 1, mask=mask)", "+ 2, mask=mask)"))
    p = cli("prebuild", "--recording", rec, "--cache-dir", toy / "cache", env=_env(toy))
    assert p.returncode == 2
    (line,) = p.stderr.strip().splitlines()
    assert "toy_kernels.toy_add_kernel" in line and "record the run again" in line
    assert "toy_scale_kernel" not in line  # unchanged: not named
    p = cli("prebuild", "--recording", rec, "--cache-dir", toy / "cache", env=child_env())
    assert p.returncode == 2
    assert "cannot import toy_kernels" in p.stderr and "install the code" in p.stderr


def test_recording_target_and_format_checks(toy):
    rec = toy / "rec.jsonl"
    env = _env(toy)
    p = cli("plan", "--recording", rec, "--target", "sm_100", env=env)
    assert p.returncode == 2 and "--retarget" in p.stderr
    plan = cli_json("plan", "--recording", rec, "--target", "sm_100", "--retarget", env=env)
    assert len(plan["specs"]) == 4 and plan["target"] == "sm_100"
    broken = toy / "broken.jsonl"
    broken.write_text(rec.read_text() + '{"format": "qsa-warmup-recording", "version": 99}\n')
    p = cli("plan", "--recording", broken, env=env)
    assert p.returncode == 2 and "broken.jsonl:5" in p.stderr and "version 99" in p.stderr
    merged = cli_json("plan", "--recording", f"{rec},{rec}", env=env)
    assert len(merged["specs"]) == 4  # duplicates merged by kernel, key and target


def test_retargeted_build_compiles_for_the_new_target(toy):
    rec = toy / "rec.jsonl"
    out = python(
        f"""
        from qsa_warmup.recording import load_recordings
        from qsa_warmup import triton_compat as tc
        rec = load_recordings({str(rec)!r}, retarget=True)
        plan = rec.build_plan("sm_100")
        with tc.active_driver(tc.parse_target("sm_100")):
            kernel = plan.specs[0].launch.warmup()
        print(kernel.metadata.target.arch, kernel.metadata.arch if hasattr(kernel.metadata,
              "arch") else "")
        """,
        env=_env(toy),
    )
    assert out.stdout.split()[0] == "100"


def test_record_without_a_command_is_one_line(toy):
    p = cli("record", "--out", toy / "r.jsonl", env=_env(toy))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "COMMAND" in p.stderr


AUTOTUNED = autotuned_module(128)

RUN_TUNED = """
import torch, triton
from tuned import tuned_kernel
x = torch.zeros(100)
tuned_kernel[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, 100)
"""


@pytest.fixture(scope="module")
def tuned_recorded(tmp_path_factory):
    """The autotuned kernel's module, a script that runs it, and its recording (tuned.rec),
    made once for the module under the offline driver."""
    folder = tmp_path_factory.mktemp("tuned")
    (folder / "tuned.py").write_text(AUTOTUNED)
    (folder / "run_tuned.py").write_text(RUN_TUNED)
    p = cli("record", "--target", "sm_90", "--out", folder / "tuned.rec", "--", sys.executable,
            folder / "run_tuned.py", env=_env(folder))  # fmt: skip
    assert p.returncode == 0, p.stderr
    return folder


@pytest.fixture
def tuned(tuned_recorded, tmp_path):
    """A copy of ``tuned_recorded`` of this test's own (its recording may be edited)."""
    shutil.copytree(tuned_recorded, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_autotuned_kernel_records_every_config_and_check_says_so(tuned):
    env, rec, cache = _env(tuned), tuned / "tuned.rec", tuned / "cache"
    lines = _lines(rec)
    requests = [r for r in lines if r.get("kind") != "autotune-winner"]
    winners = [r for r in lines if r.get("kind") == "autotune-winner"]
    assert len(requests) == 2 and all(r["autotuned"] for r in requests)  # both configs
    # its choice for n=100 was made under the offline driver: kept, marked as not measured
    assert [(w["qualname"], w["key"], w["measured"]) for w in winners] == [
        ("tuned_kernel", [100, "torch.float32"], False)
    ]
    assert cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)["compiled"] == 2
    p = cli("check", "--recording", rec, "--cache-dir", cache, env=env)
    assert p.returncode == 0 and "autotuned kernels tuned_kernel" in p.stdout, p.stdout
    assert "no winner measured on a sm_90 GPU" in p.stdout, p.stdout


GIVE_WINNERS = """
import json, sys
import qsa_warmup
r = qsa_warmup.warmup(recordings=sys.argv[1], target="sm_90", cache_dir=sys.argv[2], jobs=1)
import tuned
cache = {repr(k): (c.kwargs, c.num_warps, any(c is o for o in tuned.tuned_kernel.configs))
         for k, c in tuned.tuned_kernel.cache.items()}
print(json.dumps(dict(given=r.autotune_winners, warnings=r.warnings, cache=cache)))
"""


def test_measured_autotune_winners_are_given_to_the_servers_autotuner(tuned):
    # A recording made on a GPU marks its winners measured; here the offline recording's line
    # is marked so (no GPU on this box; tests/test_gpu_recording.py records one on a GPU).
    (tuned / "give.py").write_text(GIVE_WINNERS)
    env, rec, cache = _env(tuned), tuned / "tuned.rec", tuned / "cache"
    lines = _lines(rec)
    for line in lines:
        if line.get("kind") == "autotune-winner":
            line["measured"] = True
            winner = line
    rec.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    p = cli("check", "--recording", rec, "--cache-dir", cache, env=env)
    assert "winners measured on sm_90 for 1 keys are stored" in p.stdout, p.stdout

    def give():
        out = subprocess.run([sys.executable, tuned / "give.py", rec, cache], env=env,
                             capture_output=True, text=True, cwd=tuned)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    got = give()
    block, warps = winner["config"]["BLOCK"], winner["config"]["num_warps"]
    # the autotuner holds its own config object for the key: it launches it, no benchmark
    assert got["given"] == 1 and got["warnings"] == [], got
    assert got["cache"] == {"(100, 'torch.float32')": [{"BLOCK": block}, warps, True]}, got
    # a winner that is none of the kernel's configs now is refused by name, not given
    winner["config"]["BLOCK"] = 256
    rec.write_text("".join(json.dumps(line) + "\n" for line in lines))
    got = give()
    assert got["given"] == 0 and got["cache"] == {}, got
    assert any("tuned.tuned_kernel" in w and "record again" in w for w in got["warnings"]), got


def test_a_kernel_defined_in_the_recorded_script_is_refused_with_the_fix(tmp_path):
    # importing the script where the recording is built would make another JIT function than
    # the one the server runs: refused, saying where to define it
    script = tmp_path / "inline.py"
    script.write_text(TOY + "\ntoy_add(torch.randn(64))\n")
    rec = tmp_path / "inline.rec"
    p = cli("record", "--target", "sm_90", "--out", rec, "--", sys.executable, script)
    assert p.returncode == 0, p.stderr
    p = cli("prebuild", "--recording", rec, "--cache-dir", tmp_path / "cache")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "__main__.toy_add_kernel" in p.stderr and "a module the server imports" in p.stderr


OTHER = """
import triton
import triton.language as tl


@triton.jit
def other_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
"""


@pytest.mark.parametrize("scope,refused", [("planned", False), ("all", True)])
def test_strict_scope_planned_covers_the_recorded_package_and_all_covers_any(toy, scope, refused):
    (toy / "other_kernels.py").write_text(OTHER)
    env, cache = _env(toy), toy / "cache"
    cli_json("prebuild", "--recording", toy / "rec.jsonl", "--cache-dir", cache, env=env)
    out = python(
        f"""
        import json, torch, qsa_warmup
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.errors import StrictModeError
        qsa_warmup.warmup(recordings={str(toy / "rec.jsonl")!r}, target="sm_90",
                          cache_dir={str(cache)!r}, strict="error", strict_scope={scope!r})
        import other_kernels
        refused = False
        with tc.active_driver(tc.parse_target("sm_90")):
            try:  # another package's kernel, compiled (warmup: never launched)
                other_kernels.other_kernel.warmup(torch.empty(8), 8, BLOCK=64, grid=(1,))
            except StrictModeError:
                refused = True
        print(json.dumps(refused))
        """,
        env=env,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) is refused


def test_recording_plan_memo_stands_for_compile_hashes_and_stale_source_is_still_refused(toy):
    rec, cache, env = toy / "rec.jsonl", toy / "cache", _env(toy)
    cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    (memo,) = [name for name in os.listdir(cache / "plans") if name.startswith("rec")]
    # a warm start plans from the memo: computing a compile hash here fails the warmup
    warm = f"""
        import json, qsa_warmup
        from qsa_warmup import triton_compat as tc

        def refuse(*args):
            raise AssertionError("compile hash computed, memo not used")

        tc.recorded_compile_hash = refuse
        report = qsa_warmup.warmup(recordings={str(rec)!r}, target="sm_90",
                                   cache_dir={str(cache)!r}, strict="error")
        print(json.dumps(dict(loaded=report.loaded, compiled=report.compiled)))
        """
    out = python(warm, env=env)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"loaded": 4, "compiled": 0}
    # a memo that does not match the requests is ignored (planned afresh, then rewritten)
    entries = json.loads((cache / "plans" / memo).read_text())
    (cache / "plans" / memo).write_text(json.dumps(entries[:-1]))
    p = cli("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    assert p.returncode == 0, p.stderr
    again = json.loads((cache / "plans" / memo).read_text())
    assert again == entries
    # with the memo in place, an edited kernel is refused by name all the same
    source = (toy / "toy_kernels.py").read_text()
    (toy / "toy_kernels.py").write_text(source.replace("+ 1, mask=mask)", "+ 2, mask=mask)"))
    p = cli("prebuild", "--recording", rec, "--cache-dir", cache, env=env)
    assert p.returncode == 2 and "toy_kernels.toy_add_kernel" in p.stderr, p.stderr
