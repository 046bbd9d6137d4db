"""The eager fast path (kernels/_fast_launch.py) against Triton's own binder and run.

A child process binds every launch with Triton's binder for sm_90 (no GPU: the compiler is
replaced by a recorder) and makes each launch twice, through ``JITFunction.run`` and through
the fast path; the two must reach the same compiled kernel with the same launcher call."""

import json
import subprocess
import sys

import pytest

from _subproc import ROOT, child_env

PAIRS = 200


@pytest.fixture(scope="module")
def findings():
    proc = subprocess.run(
        [sys.executable, "tests/_fast_launch_child.py", str(PAIRS), "7"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_fast_path_launches_what_tritons_binder_chooses(findings):
    probe = findings["probe"]
    assert probe["mismatches"] == []
    # each pair's second round hits the fast path; the rest bind new variants through Triton
    assert probe["stats"]["fast"] >= PAIRS
    assert probe["variants"] > 50  # the pairs reached many distinct Triton keys


def test_an_emptied_kernel_cache_sends_the_launch_back_through_triton(findings):
    forgotten = findings["forgotten"]
    assert forgotten == {"triton_launches": 1, "hook_asked": 1, "launched_new_kernel": True}


def test_triton_launches_only_holds_in_its_own_thread_only(findings):
    assert findings["per_thread"] == {"this thread": 1, "other": 0, "after": 0}


def test_a_launch_hook_keeps_the_launch_on_tritons_path(findings):
    assert findings["enter_hook"] == {"triton_launches": 1, "hook_passed": True}


@pytest.mark.parametrize(
    "op",
    [
        "topk_3000x64",
        "topk_12000x512",
        "topk_40000x2048",
        "topk_split_apart",
        "decode_select",
        "decode_select_split",
        "prefill_select",
        "expand",
    ],
)
def test_every_op_launches_the_same_kernels_on_the_fast_path(findings, op):
    assert findings["ops"][op]["same"], findings["ops"][op]
    assert findings["ops"][op]["launches"] >= 1


@pytest.mark.parametrize(
    "op", ["topk_3000x64", "topk_12000x512", "decode_select", "decode_select_split", "expand"]
)
def test_a_repeated_op_call_replays_its_prepared_launches(findings, op):
    # one prepared replay per call of the op made on the fast path
    assert findings["ops"][op]["prepared"] == 1, findings["ops"][op]


def test_a_prepared_select_gives_way_to_hooks_and_tritons_path(findings):
    # the decode select 1 x 128 makes two launches: both go through Triton, none is replayed
    gives_way = findings["ops"]["decode_select_gives_way"]
    for state in ("launch enter hook", "launch exit hook", "triton_launches_only"):
        assert gives_way[state] == {"triton": 2, "prepared": 0}, state
    assert gives_way["pre-run hook"]["prepared"] == 0  # the hooked kernel's launch, at least
    assert gives_way["pre-run hook"]["triton"] >= 1
    assert gives_way["after"] == 1


def test_a_prepared_select_still_refuses_bad_arguments(findings):
    assert findings["ops"]["decode_select_still_checked"] == {
        "out int64": "TypeError",
        "out too narrow": "ValueError",
        "q misaligned": "ValueError",
        "q float32": "TypeError",
        "q not contiguous": "ValueError",
    }
