"""The targets this Triton compiles for: the table is checked against its ptxas, and the
oldest and newest targets compile offline."""

import re
import subprocess

import pytest

from _subproc import last_json, python


def test_every_listed_target_is_accepted_by_the_ptxas_triton_picks_for_it():
    from triton.backends.nvidia.compiler import get_ptxas

    from qsa_warmup import triton_compat as tc

    for arch in tc.compilable_archs():
        help_text = subprocess.run(
            [get_ptxas(arch).path, "--help"], capture_output=True, text=True
        ).stdout
        allowed = set(re.findall(r"'(sm_\d+a?)'", help_text))
        assert f"sm_{arch}" in allowed, (arch, get_ptxas(arch).path)


def test_unlisted_targets_are_refused_naming_the_known_ones():
    from qsa_warmup import triton_compat as tc

    for name in ("sm_999", "sm_70", "gfx90a", "sm90"):
        with pytest.raises(ValueError) as err:
            tc.parse_target(name)
        assert name in str(err.value)
    assert "sm_90" in str(pytest.raises(ValueError, tc.parse_target, "sm_999").value)


@pytest.mark.slow
def test_oldest_and_newest_targets_compile_offline():
    out = last_json(
        python("""
        import json, torch
        import kernels
        from kernels import TensorMeta as M
        from qsa_warmup import triton_compat as tc
        tc.store_binaries_only(True)
        archs = tc.compilable_archs()
        done = {}
        for arch in (archs[0], archs[-1]):
            with tc.active_driver(tc.parse_target(f"sm_{arch}")):
                launch = kernels.expand_launch(M((2, 16), torch.int32), M((2,), torch.int32),
                                               M((2,), torch.int32), 4, 64, M((2, 68), torch.int32))
                done[arch] = tc.compiled_info(launch.warmup()).target
        print(json.dumps(done))
    """)
    )
    assert out == {"80": "sm_80", "121": "sm_121"}


@pytest.mark.slow
def test_several_targets_in_one_cache_each_planned_built_and_traced_as_itself(tmp_path):
    from _subproc import cli_json

    root = tmp_path / "c"
    both = ["--preset", "tiny", "--target", "sm_90,sm_120", "--cache-dir", root]
    report = cli_json("prebuild", *both)
    assert [t["target"] for t in report["targets"]] == ["sm_90", "sm_120"]
    prefill = {
        t["target"]: [r["spec_id"] for r in t["results"] if r["spec_id"].startswith("prefill")]
        for t in report["targets"]
    }
    # sm_120 has 99 KB of shared memory a block: its prefill tiles are smaller
    assert prefill["sm_90"] != prefill["sm_120"]
    assert all(t["unloadable"] == [] and t["failed"] == 0 for t in report["targets"])
    out = cli_json("check", *both, "--trace")
    for t in out["targets"]:
        assert t["ok"] == t["planned"] == 5
        assert t["trace"]["unplanned"] == [] and t["trace"]["uncached"] == []
    every = cli_json("plan", "--preset", "tiny", "--target", "all")["targets"]
    assert [t["target"] for t in every] == [f"sm_{a}" for a in tc_archs()]


def tc_archs():
    from qsa_warmup import triton_compat as tc

    return tc.compilable_archs()


def test_target_limits_agree_with_the_kernels_table():
    # qsa_warmup never imports kernels outside its QSA registration: the hardware table is
    # kept in both layers, and must not drift
    from kernels import limits
    from qsa_warmup.triton_compat.targets import TARGET_LIMITS

    assert {arch: shared for arch, (shared, _) in TARGET_LIMITS.items()} == (
        limits.SHARED_MEMORY_PER_BLOCK
    )
