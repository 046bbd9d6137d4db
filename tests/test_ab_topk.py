"""tools/ab_topk.py: the other commit's kernels run beside the tree's (checked on the CPU)."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "ab_topk.py")


def _git(*args):
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True)
    return done.stdout if done.returncode == 0 else None


def _run(*args, **kw):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the tool sets it for --check itself
    return subprocess.run(
        [sys.executable, TOOL, *args], capture_output=True, text=True, env=env, **kw
    )


@pytest.mark.parametrize("given", ["commit", "folder"])
def test_ab_topk_runs_the_base_commits_kernels_beside_the_trees(tmp_path, given):
    last = _git("log", "-n", "1", "--format=%H", "--", "kernels/topk.py")
    if not last:
        pytest.skip("no git history here")
    base = last.decode().strip() + "^"  # its kernels/topk.py differs from the tree's
    old = _git("show", f"{base}:kernels/topk.py")
    if old is None:
        pytest.skip("the commit before the last top-k change is not in this clone")
    if given == "folder":  # as made for a machine without the history
        archive = _git("archive", base, "kernels")
        subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
        base = str(tmp_path)
    out = tmp_path / "ab.json"
    done = _run(
        "--check", "--base", base, "--shapes", "2x2048x512", "--logits", "ties", "--json", str(out)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["base_topk_sha256"] == hashlib.sha256(old).hexdigest()
    with open(os.path.join(ROOT, "kernels", "topk.py"), "rb") as f:
        assert report["new_topk_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert report["base_topk_sha256"] != report["new_topk_sha256"]
    [case] = report["cases"]
    assert case["base_exact"] and case["new_exact"]


@pytest.mark.parametrize(
    "args, named",
    [
        (["--base", "no-such-commit"], "--base"),
        (["--shapes", "2x2048"], "--shapes"),
        (["--logits", "gaussian"], "--logits"),
    ],
)
def test_ab_topk_bad_input_is_one_line_naming_it(args, named):
    done = _run("--check", *args)
    assert done.returncode == 2
    assert named in done.stderr and "Traceback" not in done.stderr
