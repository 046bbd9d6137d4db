"""A cache's lifecycle from the CLI: stats and its counters (kept by the hook and by prebuild,
safe under concurrent writers), and the CLI's manners (--version, presets in --help, the
warmup summary)."""

import os
import shutil

import pytest

from _subproc import binary_path, cli, cli_json, python

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


def test_warmup_summary_goes_through_logging_or_one_clear_line(tmp_path):
    root = str(tmp_path / "c")
    cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
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
