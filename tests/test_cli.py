"""The qsa-warmup CLI contract: plan, prebuild, check (with --trace), info, exit codes."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from _subproc import (
    ROOT,
    binary_path,
    child_env,
    cli,
    cli_argv,
    cli_json,
    entry_files,
    fake_other_toolchain,
    full_disk_under,
    python,
    together,
    try_readonly_bind,
)

pytestmark = pytest.mark.slow

TINY_IDS = [
    "decode.bf16.dql1.qg1.n128.s1.tpp2.w4",
    "decode.bf16.dql2.qg2.n128.s1.tpp2.w4",
    "prefill.bf16.tr64.w8",
    "topk.single.b1024.w4",
    "expand.i32",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny cache built once; tests that damage it work on copies."""
    root = str(tmp_path_factory.mktemp("cache") / "c")
    report = cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    return root, report


def copy_of(built, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(built[0], dst)
    return dst


def test_plan_default_and_tiny_and_custom(tmp_path):
    default = cli_json("plan")
    fams = [s["family"] for s in default["specs"]]
    # top-k: four coop chunks (512 for few prefill rows of 4K-8K columns); rows finished apart
    # scan in their own chunk
    counts = tuple(fams.count(f) for f in ("decode", "prefill", "topk", "expand"))
    assert counts == (24, 2, 13, 2)
    assert [s["id"] for s in cli_json("plan", "--preset", "tiny")["specs"]] == TINY_IDS
    assert cli_json("plan")["specs"] == default["specs"]  # stable ids and keys
    cfg = dict(json.load(open(os.path.join(ROOT, "tests", "data", "small_fp8.json"))))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    specs = cli_json("plan", "--config", path)["specs"]
    decode = [s["id"] for s in specs if s["family"] == "decode"]
    assert decode == [
        "decode.fp8.dql1.qg1.n128.s1.tpp1.w4",
        "decode.fp8.dql2.qg2.n128.s1.tpp1.w4",
        "decode.fp8.dql3.qg4.n128.s1.tpp1.w4",
    ]
    assert {s["family"] for s in specs} == {"decode", "prefill", "topk", "expand"}


def test_prebuild_then_check(built, tmp_path):
    root, report = built
    assert report["planned"] == 5 and report["compiled"] == 5 and report["cached"] == 0
    assert {"planned", "compiled", "cached", "seconds", "cache_dir", "target"} <= set(report)
    out = cli_json("check", "--preset", "tiny", "--cache-dir", root)
    assert out["ok"] == 5 and out["failing"] == []
    again = cli_json("prebuild", "--preset", "tiny", "--cache-dir", copy_of(built, tmp_path))
    assert again["compiled"] == 0 and again["cached"] == 5


@pytest.mark.parametrize(
    "damage,state",
    [
        ("delete", "missing"),
        ("truncate", "corrupt"),
        ("flip", "corrupt"),
        ("drop_entry", "missing"),
        ("drop_entry_and_flip", "missing"),
    ],
)
def test_damage_is_found_and_only_that_spec_rebuilt(built, tmp_path, damage, state):
    root = copy_of(built, tmp_path)
    victim = "decode.bf16.dql2.qg2.n128.s1.tpp2.w4"
    binary = binary_path(root, victim)
    if damage == "delete":
        shutil.rmtree(os.path.dirname(binary))
    elif damage == "truncate":
        with open(binary, "r+b") as f:
            f.truncate(os.path.getsize(binary) // 2)
    elif damage == "flip":
        with open(binary, "r+b") as f:
            f.seek(os.path.getsize(binary) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x10]))
    else:
        os.unlink(entry_files(root, victim)[0])
        if damage == "drop_entry_and_flip":  # nothing left to verify Triton's own files against
            with open(binary, "r+b") as f:
                f.seek(100)
                b = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([b[0] ^ 0x01]))
    damaged = open(binary, "rb").read() if os.path.exists(binary) else None
    out = cli_json("check", "--preset", "tiny", "--cache-dir", root, expect=1)
    assert [(f["spec"], f["state"]) for f in out["failing"]] == [(victim, state)]
    repaired = cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    assert repaired["compiled"] == 1 and repaired["cached"] == 4
    assert cli_json("check", "--preset", "tiny", "--cache-dir", root)["ok"] == 5
    if damage == "drop_entry_and_flip":  # rebuilt, not re-recorded as found
        assert open(binary_path(root, victim), "rb").read() != damaged


def test_other_toolchain_is_stale(built, tmp_path):
    root = copy_of(built, tmp_path)
    fake_other_toolchain(root, "python", "3.99")
    out = cli_json("check", "--preset", "tiny", "--cache-dir", root, expect=1)
    assert len(out["failing"]) == 5
    assert all(f["state"] == "stale" and "python 3.99 vs" in f["reason"] for f in out["failing"])


def test_concurrent_prebuilds_compile_each_spec_once(tmp_path):
    root = str(tmp_path / "shared")
    argv = cli_argv("prebuild", "--preset", "tiny", "--cache-dir", root, "--json", "--jobs", 1)
    reports = together([argv] * 4)
    assert sum(r["compiled"] for r in reports) == 5
    assert all(r["failed"] == 0 and r["compiled"] + r["cached"] == 5 for r in reports)
    assert cli_json("check", "--preset", "tiny", "--cache-dir", root)["ok"] == 5


def test_trace_passes_and_catches_an_unplanned_spec(built):
    root = built[0]
    out = cli_json("check", "--preset", "tiny", "--cache-dir", root, "--trace")
    assert out["trace"]["unplanned"] == [] and out["trace"]["planned_not_reached"] == []
    # a planner that forgets the expansion kernel: the trace must see its launches
    p = python(
        f"""
        import sys
        import qsa_warmup.qsa.planning as planner
        planner._expand_points = lambda cfg, arch: iter(())
        from qsa_warmup.cli import main
        sys.exit(main(["check", "--preset", "tiny", "--cache-dir", {root!r}, "--trace"]))
    """,
        check=False,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "UNPLANNED   _expand_kernel" in p.stdout


PLAIN_TRITON = """
import json
from triton import knobs
from qsa_warmup.qsa.config import load_config
from qsa_warmup.planner import build_plan
from qsa_warmup import triton_compat as tc
plan = build_plan(load_config(preset="tiny"))
hits = []
knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
with tc.active_driver(tc.parse_target("sm_90")):
    for spec in plan.specs:
        spec.launch.warmup()
print(json.dumps({"hits": sum(hits), "compiles": len(hits) - sum(hits), "dir": knobs.cache.dir}))
"""


def test_relocated_cache_hits_in_plain_triton(built, tmp_path):
    # a cache whose build folder no longer exists: Triton's absolute group paths lead nowhere
    first, moved, control = tmp_path / "first", tmp_path / "moved", tmp_path / "control"
    shutil.copytree(built[0], first)
    cli_json("info", "--preset", "tiny", "--cache-dir", first)  # its group files now name `first`
    os.rename(first, moved)
    shutil.copytree(moved, control)
    # Triton alone on a moved copy: every lookup misses (the failure qsa-warmup exists to prevent)
    p = python(PLAIN_TRITON, env=child_env(TRITON_CACHE_DIR=control / "triton"))
    assert json.loads(p.stdout.strip().splitlines()[-1])["hits"] == 0
    assert cli_json("check", "--preset", "tiny", "--cache-dir", moved)["ok"] == 5
    triton_dir = cli_json("info", "--preset", "tiny", "--cache-dir", moved)["triton_cache_dir"]
    # only Triton's own cache, pointed at info's folder: every plan spec must load, none compile
    p = python(PLAIN_TRITON, env=child_env(TRITON_CACHE_DIR=triton_dir))
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {
        "hits": 5,
        "compiles": 0,
        "dir": triton_dir,
    }


def test_readonly_relocated_cache(built, tmp_path):
    src = copy_of(built, tmp_path)
    ro = str(tmp_path / "ro")
    if not try_readonly_bind(src, ro):
        pytest.skip("bind mounts are not permitted here")
    try:
        assert subprocess.run(["touch", os.path.join(ro, "x")], capture_output=True).returncode != 0
        assert cli_json("check", "--preset", "tiny", "--cache-dir", ro)["ok"] == 5
        info = cli_json("info", "--preset", "tiny", "--cache-dir", ro)
        assert info["writable"] is False and info["triton_cache_dir"] != os.path.join(ro, "triton")
    finally:
        subprocess.run(["umount", ro])


@pytest.mark.parametrize(
    "change,field",
    [
        ({"head_dim": 32}, "head_dim"),
        ({"colour": 1}, "colour"),
        ({"token_topk": 63}, "token_topk"),
        ({"target": "gfx90a"}, "target"),
        ({"cache_dtypes": ["float16"]}, "cache_dtypes"),
        ({"max_logits_mb": 0}, "max_logits_mb"),
        ({"num_heads": True}, "num_heads"),
    ],
)
def test_bad_config_exits_2_naming_the_field(tmp_path, change, field):
    from qsa_warmup.qsa.config import PRESETS

    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**PRESETS["tiny"], **change}))
    p = cli("plan", "--config", path)
    assert p.returncode == 2 and field in p.stderr, p.stderr


def test_usage_errors_exit_2(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    assert cli("plan", "--config", tmp_path / "x.json").returncode == 2
    assert cli("plan", "--preset", "nope").returncode == 2
    assert cli("check", "--target", "sm90x").returncode == 2
    assert cli("frobnicate").returncode == 2


def test_unloadable_is_reported():
    from qsa_warmup.cache import BoundCache, Fingerprint, Lookup
    from qsa_warmup.qsa.config import load_config

    cache = BoundCache(
        load_config(preset="tiny"), "sm_90", "/nonexistent", fingerprint=Fingerprint({})
    )
    status = cache.loadable(Lookup("s", "ok", entry={"shared": 300_000, "threads": 128}))
    assert status.state == "unloadable" and "300000" in status.reason and "232448" in status.reason
    assert cache.loadable(Lookup("s", "ok", entry={"shared": 100_000, "threads": 128})).ok


def one_line_error(p, code=2):
    """The CLI's failure contract: the exit code, and one line on stderr, no traceback."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == code, (p.returncode, p.stderr)
    assert (
        len(lines) == 1 and lines[0].startswith("qsa-warmup: ") and "Traceback" not in p.stderr
    ), p.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["plan", "prebuild", "check"])
def test_a_target_triton_cannot_compile_for_is_refused(tmp_path, command):
    line = one_line_error(
        cli(command, "--preset", "tiny", "--target", "sm_999", "--cache-dir", tmp_path / "c")
    )
    assert (
        "--target" in line and "sm_999" in line and "sm_90" in line
    )  # names what it can compile for
    assert not (tmp_path / "c").exists()


def test_fp8_below_sm89_is_refused_naming_dtype_target_and_minimum():
    line = one_line_error(cli("plan", "--target", "sm_80"))  # default has fp8
    assert "float8_e4m3fn" in line and "sm_80" in line and "sm_89" in line
    assert (
        cli_json("plan", "--preset", "tiny", "--target", "sm_80")["target"] == "sm_80"
    )  # bf16 runs there


def test_config_with_several_problems_names_all(tmp_path):
    from qsa_warmup.qsa.config import PRESETS

    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            {**PRESETS["tiny"], "head_dim": 32, "token_topk": 63, "colour": 1, "target": "sm_70"}
        )
    )
    line = one_line_error(cli("plan", "--config", path))
    for field in ("head_dim", "token_topk", "colour", "target"):
        assert field in line, line


def test_cache_dir_that_is_a_file_is_an_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for command in ("check", "prebuild", "info"):
        line = one_line_error(cli(command, "--preset", "tiny", "--cache-dir", f))
        assert str(f) in line and "not a folder" in line
    assert f.read_text() == "x"


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--jobs", "abc"],
        ["frobnicate"],
        [],
        ["plan", "--config"],
        ["plan", "--preset", "tiny", "--jobs", "0"],
    ],
)
def test_usage_errors_are_one_line(args):
    one_line_error(cli(*args))


def test_closed_pipe_ends_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (plan | head -0)
    p = subprocess.run(
        [sys.executable, "-m", "qsa_warmup", "plan", "--preset", "tiny"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=300,
    )
    os.close(write)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_prebuild_on_a_readonly_cache(built, tmp_path):
    src = copy_of(built, tmp_path)
    ro = str(tmp_path / "ro")
    if not try_readonly_bind(src, ro):
        pytest.skip("bind mounts are not permitted here")
    try:
        p = cli(
            "prebuild", "--preset", "tiny", "--cache-dir", ro
        )  # holds everything: nothing to do
        assert p.returncode == 0 and "read-only" in p.stderr and "holds all 5" in p.stderr, p.stderr
    finally:
        subprocess.run(["umount", ro])
    os.unlink(entry_files(src, TINY_IDS[0])[0])
    assert try_readonly_bind(src, ro)
    try:
        line = one_line_error(cli("prebuild", "--preset", "tiny", "--cache-dir", ro))
        assert "read-only" in line and "1 of 5" in line
    finally:
        subprocess.run(["umount", ro])


@pytest.mark.parametrize("verbose", [False, True])
def test_prebuild_on_a_full_disk_is_a_line_per_spec_and_a_summary(tmp_path, verbose):
    root = str(tmp_path / "full")
    argv = ["prebuild", "--preset", "tiny", "--cache-dir", root, "--jobs", "2"]
    argv += ["-v"] if verbose else []
    code = full_disk_under(os.path.join(root, "triton")) + (
        f"import sys\nfrom qsa_warmup.cli import main\nsys.exit(main({argv!r}))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT
    )
    assert p.returncode == 2, p.stderr[-2000:]
    failed = [line for line in p.stdout.splitlines() if line.strip().startswith("FAILED")]
    assert len(failed) == 5 and all("No space left" in line for line in failed), p.stdout
    assert p.stdout.splitlines()[0].startswith("5 planned: 0 compiled")
    summary = [line for line in p.stderr.splitlines() if "failed to build" in line]
    assert len(summary) == 1 and "5 of 5 specs" in summary[0]
    assert ("Traceback" in p.stderr) == verbose, p.stderr[-3000:]
