"""A cache's lifecycle from the CLI: stats and its counters (kept by the hook and by prebuild,
safe under concurrent writers), gc and clear (what no manifest needs, a size cap, an age, beside
a running start), and the CLI's manners (--version, presets in --help, the warmup summary)."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from _subproc import binary_path, child_env, cli, cli_json, python

pytestmark = pytest.mark.slow


def test_counters_survive_concurrent_writers(tmp_path):
    root = str(tmp_path / "c")
    p = python(
        f"""
        import multiprocessing as mp
        from qsa_warmup.cache import CacheFolder
        from qsa_warmup.stats import add_counts, read_counts

        def work(_):
            folder = CacheFolder({root!r})
            for _ in range(150):
                add_counts(folder, loads=1, compiles=2)

        if __name__ == "__main__":
            with mp.get_context("fork").Pool(4) as pool:
                pool.map(work, range(4))
            print(read_counts(CacheFolder({root!r})))
        """
    )
    counts = eval(p.stdout.strip().splitlines()[-1])
    assert (counts["loads"], counts["compiles"]) == (600, 1200)


WARM = """
import json, sys
from qsa_warmup import warmup
r = warmup("tiny", target="sm_90", cache_dir=sys.argv[1], jobs=1)
print(json.dumps({"loaded": r.loaded, "compiled": r.compiled}))
"""


def test_stats_counts_builds_starts_and_repairs(tmp_path):
    root = str(tmp_path / "c")
    cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    out = cli_json("stats", "--cache-dir", root)
    assert (out["manifests"], out["entries"]) == (1, 5) and out["bytes"] > 0
    assert out["counters"]["builds"] == 1 and out["counters"]["compiles"] == 5
    # a start, then one on a damaged binary: the repair is counted
    script = tmp_path / "warm.py"
    script.write_text(WARM)
    python(f"import runpy, sys; sys.argv = ['w', {root!r}]; runpy.run_path({str(script)!r})")
    with open(binary_path(root, "expand.i32"), "r+b") as f:
        f.write(b"\0\0\0\0")
    python(f"import runpy, sys; sys.argv = ['w', {root!r}]; runpy.run_path({str(script)!r})")
    counters = cli_json("stats", "--cache-dir", root)["counters"]
    assert counters["starts"] == 2 and counters["loads"] == 10  # the rebuilt one loads too
    assert counters["rebuilt_after_damage"] == 1 and counters["compiles"] == 6
    zeroed = cli_json("stats", "--cache-dir", root, "--zero")["counters"]
    assert set(zeroed.values()) == {0}


def test_stats_zero_on_a_readonly_cache_is_one_line(tmp_path):
    from _subproc import try_readonly_bind

    src = str(tmp_path / "src")
    cli_json("prebuild", "--preset", "tiny", "--cache-dir", src)
    ro = str(tmp_path / "ro")
    if not try_readonly_bind(src, ro):
        pytest.skip("bind mounts are not permitted here")
    try:
        assert cli_json("stats", "--cache-dir", ro)["entries"] == 5
        p = cli("stats", "--cache-dir", ro, "--zero")
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "read-only" in p.stderr
    finally:
        os.system(f"umount {ro}")
    shutil.rmtree(src)


def test_version_and_presets_in_help():
    p = cli("--version")
    assert p.returncode == 0 and p.stdout.startswith("qsa-warmup ") and "triton 3.6.0" in p.stdout
    help_text = cli("prebuild", "--help").stdout
    assert "default, tiny" in help_text


SUMMARY = """
import logging, sys
if sys.argv[2] == "configured":
    logging.basicConfig(level=logging.INFO, format="LOG %(name)s %(message)s")
from qsa_warmup import warmup
warmup("tiny", target="sm_90", cache_dir=sys.argv[1], jobs=1)
"""


def test_warmup_summary_goes_through_logging_or_one_clear_line(tmp_path, tiny_copy):
    root = tiny_copy()
    script = tmp_path / "s.py"
    script.write_text(SUMMARY)
    runs = {}
    for mode in ("bare", "configured"):
        runs[mode] = python(
            f"import runpy, sys; sys.argv = ['s', {root!r}, {mode!r}]; "
            f"runpy.run_path({str(script)!r})"
        ).stderr
    bare = [line for line in runs["bare"].splitlines() if "specs ready" in line]
    assert bare == [bare[0]] and bare[0].startswith("qsa-warmup: 5 specs ready on sm_90")
    logged = [line for line in runs["configured"].splitlines() if "specs ready" in line]
    assert len(logged) == 1 and logged[0].startswith("LOG qsa_warmup.hook qsa-warmup: 5 specs")


# -- gc and clear ---------------------------------------------------------------------------

WIDE = {"num_heads": 8}  # tiny with other decode and prefill kernels; top-k and expansion shared


@pytest.fixture(scope="module")
def two_deployments(tmp_path_factory):
    """A cache holding tiny and a wider variant for sm_90; they share some Triton folders."""
    root = str(tmp_path_factory.mktemp("gc") / "c")
    wide = tmp_path_factory.mktemp("cfg") / "wide.json"
    from qsa_warmup.qsa.config import PRESETS

    wide.write_text(json.dumps({**PRESETS["tiny"], **WIDE}))
    cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    cli_json("prebuild", "--config", str(wide), "--cache-dir", root)
    return root, str(wide)


def _manifests(root):
    return sorted(n for n in os.listdir(os.path.join(root, "qsa")) if not n.startswith("."))


def _listing(root):
    return sorted(
        os.path.relpath(os.path.join(b, n), root) for b, _, fs in os.walk(root) for n in fs
    )


def _ok(root, *config):
    """How many planned specs ``check`` finds ready (it exits 1 when not all are)."""
    return json.loads(cli("check", *config, "--cache-dir", root, "--json").stdout)["ok"]


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_gc_removes_what_no_manifest_needs_and_keeps_every_manifest_whole(
    two_deployments, tmp_path
):
    src, wide = two_deployments
    root = shutil.copytree(src, str(tmp_path / "c"))
    triton = os.path.join(root, "triton")
    a_kernel = sorted(os.listdir(triton))[0]
    shutil.copytree(os.path.join(triton, a_kernel), os.path.join(triton, "PLAINTRITONKERNEL"))
    os.makedirs(os.path.join(root, "junk"))
    for name, age in ((".tmp-old", 7200), (".tmp-fresh", 0)):
        with open(os.path.join(root, "qsa", name), "w") as f:
            f.write("partial")
        _age(os.path.join(root, "qsa", name), age)
    plans = os.path.join(root, "plans")
    memo = sorted(os.listdir(plans))[0]
    shutil.copy(os.path.join(plans, memo), os.path.join(plans, memo[:-13] + "00000000.json"))
    with open(os.path.join(root, "toolchain-memo", "triton_key-" + "0" * 32 + ".json"), "w") as f:
        f.write('{"value": "another triton"}')
    before = _listing(root)

    dry = cli_json("gc", "--cache-dir", root, "--dry-run")
    assert _listing(root) == before  # a dry run removes nothing
    out = cli_json("gc", "--cache-dir", root)
    for report in (dry, out):
        assert report["manifests"] == [] and report["triton_folders"] == 1
        assert report["plan_memos"] == 1 and report["toolchain_memos"] == 1
        assert sorted(report["stray"]) == ["junk", "qsa/.tmp-old"]
    assert dry["bytes_after"] == out["bytes_after"] < out["bytes_before"]
    assert not os.path.exists(os.path.join(triton, "PLAINTRITONKERNEL"))
    assert os.path.exists(os.path.join(root, "qsa", ".tmp-fresh"))  # maybe a write in progress
    assert _ok(root, "--preset", "tiny") == 5 and _ok(root, "--config", wide) == 5
    again = cli_json("gc", "--cache-dir", root)
    assert again["bytes_before"] == again["bytes_after"]  # nothing left to collect


@pytest.mark.parametrize("how", ["max-size", "older-than"])
def test_gc_drops_the_least_recently_used_manifest_with_only_its_own_files(
    two_deployments, tmp_path, how
):
    src, wide = two_deployments
    root = shutil.copytree(src, str(tmp_path / "c"))
    # tiny was last used two days ago, the wide one now (a start touches its stamp)
    python(f"import qsa_warmup; qsa_warmup.warmup({wide!r}, cache_dir={root!r}, target='sm_90')")
    tiny = next(
        n for n in _manifests(root) if not os.path.exists(os.path.join(root, "qsa", n, "used"))
    )
    _age(os.path.join(root, "qsa", tiny, "manifest.json"), 2 * 86400)
    size = cli_json("stats", "--cache-dir", root)["bytes"]
    args = ["--max-size", str(size - 1)] if how == "max-size" else ["--older-than", "1d"]
    out = cli_json("gc", "--cache-dir", root, *args)
    assert out["manifests"] == [tiny], out
    assert _ok(root, "--config", wide) == 5  # its files shared with tiny stayed
    assert _ok(root, "--preset", "tiny") == 0
    assert out["bytes_after"] == cli_json("stats", "--cache-dir", root)["bytes"] < size


SLOW_START = """
import sys, time
import qsa_warmup.hook as hook
verify = hook.verify
def slow_verify(*args, **kw):  # the start holds the cache: gc must wait for it
    open(sys.argv[2], "w").close()
    time.sleep(3)
    return verify(*args, **kw)
hook.verify = slow_verify
r = hook.warmup("tiny", cache_dir=sys.argv[1], target="sm_90", jobs=1)
print(r.loaded, r.compiled, time.time())
"""


def test_gc_waits_for_a_start_that_is_reading_the_cache(tmp_path, tiny_copy):
    root = tiny_copy()
    script, marker = tmp_path / "slow.py", str(tmp_path / "reading")
    script.write_text(SLOW_START)
    start = subprocess.Popen(
        [sys.executable, str(script), root, marker],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    while not os.path.exists(marker):
        time.sleep(0.05)
    out = cli_json("gc", "--cache-dir", root, "--max-size", "0")
    done = time.time()
    loaded, compiled, finished = start.communicate(timeout=300)[0].split()
    assert (int(loaded), int(compiled)) == (5, 0)  # nothing was removed under it
    assert float(finished) <= done and len(out["manifests"]) == 1


def test_gc_and_clear_refuse_bad_input_in_one_line(tmp_path, tiny_copy):
    from _subproc import try_readonly_bind

    src = tiny_copy("src")
    cases = [
        (["gc", "--cache-dir", src, "--max-size", "12Q"], "--max-size"),
        (["gc", "--cache-dir", src, "--older-than", "soon"], "--older-than"),
        (["gc", "--cache-dir", str(tmp_path)], "does not look like a qsa-warmup cache"),
        (["clear", "--cache-dir", str(tmp_path)], "does not look like a qsa-warmup cache"),
    ]
    ro = str(tmp_path / "ro")
    mounted = try_readonly_bind(src, ro)
    if mounted:
        cases += [
            (["gc", "--cache-dir", ro], "read-only"),
            (["clear", "--cache-dir", ro], "read-only"),
        ]
    try:
        for args, words in cases:
            p = cli(*args)
            assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
            assert words in p.stderr and "Traceback" not in p.stderr
    finally:
        if mounted:
            os.system(f"umount {ro}")
    assert _ok(src, "--preset", "tiny") == 5  # refused: nothing removed
    assert cli_json("clear", "--cache-dir", src)["freed"] > 0
    assert os.listdir(src) == ["locks"] and _ok(src, "--preset", "tiny") == 0


# -- explain --------------------------------------------------------------------------------


def test_key_differences_name_each_part_after_the_kernel_parameters():
    from qsa_warmup.explain import key_differences

    cached = "[('*fp32', 'D'), ('i32', ''), ('constexpr', 512)]{'num_warps': 4, 'debug': False}"
    planned = "[('*fp32', 'D'), ('i32', 'D'), ('constexpr', 1024)]{'num_warps': 8, 'debug': False}"
    assert key_differences(cached, planned, ["x", "n", "BLOCK"]) == [
        "argument n: i32, not divisible by 16 cached, i32, divisible by 16 planned",
        "constexpr BLOCK: 512 cached, 1024 planned",
        "option num_warps: 4 cached, 8 planned",
    ]
    assert key_differences(planned, planned, ["x", "n", "BLOCK"]) == []


def _explain(root, spec, *config):
    return cli_json("explain", spec, *config, "--cache-dir", root)


def test_explain_names_the_toolchain_part_the_constexpr_and_the_specialization(
    two_deployments, tmp_path, tiny_copy
):
    from _subproc import entry_files, fake_other_toolchain

    src, wide = two_deployments
    # a constexpr: the wide config's decode kernel against tiny's
    root = shutil.copytree(src, str(tmp_path / "c"))
    spec = "decode.bf16.dql1.qg1.n128.s1.tpp2.w4"
    tiny_only = tiny_copy("tiny")
    out = _explain(tiny_only, spec, "--config", wide)
    assert (
        out["state"] == "missing"
        and "constexpr NUM_HEADS: 4 cached, 8 planned" in out["differences"]
    ), out
    assert any("prebuild this config" in a for a in out["advice"])
    # an argument's specialization: the entry's key edited to another divisibility
    path, entry = entry_files(tiny_only, "topk.single.b1024.w4")
    entry["key"] = entry["key"].replace("'D'", "''", 1)
    with open(path, "w") as f:
        json.dump(entry, f)
    assert "'D'" in entry["key"]
    out = _explain(tiny_only, "topk.single.b1024.w4", "--preset", "tiny")
    assert any(
        d.startswith("argument ") and "not divisible by 16 cached" in d for d in out["differences"]
    ), out
    # the toolchain: the only manifest built by "another Python"
    fake_other_toolchain(tiny_only, "python", "3.10")
    out = _explain(tiny_only, spec, "--preset", "tiny")
    assert out["state"] == "stale" and out["differences"][0].startswith(
        "toolchain: python 3.10 cached"
    ), out
    assert "another toolchain" in out["advice"][0]
    # ready: said so
    assert _explain(root, spec, "--preset", "tiny")["state"] == "ok"


def test_check_explain_and_an_unknown_spec_id(two_deployments, tmp_path, tiny_copy):
    src, wide = two_deployments
    root = tiny_copy()
    out = json.loads(
        cli("check", "--config", wide, "--cache-dir", root, "--explain", "--json").stdout
    )
    assert [e["spec"] for e in out["explain"]] == [f["spec"] for f in out["failing"]]
    assert all(e["nearest"] and e["advice"] for e in out["explain"])
    p = cli("explain", "topk.single.b1024.w9", "--preset", "tiny", "--cache-dir", root)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "SPEC_ID" in p.stderr and "closest: topk.single.b1024.w4" in p.stderr
