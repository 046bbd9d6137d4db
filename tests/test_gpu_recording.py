"""GPU: an autotuned kernel recorded on the GPU (its winner measured there), built from the
recording, then served by a fresh process that neither compiles nor benchmarks."""

import json
import os
import subprocess
import sys

import pytest

from _helpers import autotuned_module
from _subproc import child_env, cli, cli_json

pytestmark = pytest.mark.gpu

TUNED = autotuned_module(256)

RUN = """
import torch, triton
from tuned import tuned_kernel
x = torch.zeros(100000, device="cuda")
tuned_kernel[lambda m: (triton.cdiv(100000, m["BLOCK"]),)](x, 100000)
torch.cuda.synchronize()
"""

SERVE = """
import json, sys, torch, triton
from triton.runtime.autotuner import Autotuner
import qsa_warmup
benchmarks = []
bench = Autotuner._bench
Autotuner._bench = lambda self, *a, **k: benchmarks.append(1) or bench(self, *a, **k)
r = qsa_warmup.warmup(recordings=sys.argv[1], cache_dir=sys.argv[2], strict="error",
                      strict_scope="all")
from tuned import tuned_kernel
x = torch.zeros(100000, device="cuda")
tuned_kernel[lambda m: (triton.cdiv(100000, m["BLOCK"]),)](x, 100000)
torch.cuda.synchronize()
print(json.dumps(dict(given=r.autotune_winners, compiled=r.compiled, loaded=r.loaded,
                      benchmarks=len(benchmarks), ones=bool((x == 1).all()))))
"""


def test_a_recorded_autotune_winner_spares_the_server_its_benchmark(tmp_path):
    for name, text in (("tuned.py", TUNED), ("run_tuned.py", RUN), ("serve.py", SERVE)):
        (tmp_path / name).write_text(text)
    env = child_env()
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    rec, cache = tmp_path / "tuned.rec", tmp_path / "cache"
    p = cli("record", "--out", rec, "--", sys.executable, tmp_path / "run_tuned.py", env=env)
    assert p.returncode == 0, p.stderr
    winners = [json.loads(line) for line in open(rec) if "autotune-winner" in line]
    assert len(winners) == 1 and winners[0]["measured"], winners
    assert cli_json("prebuild", "--recording", rec, "--cache-dir", cache, env=env)["failed"] == 0
    out = subprocess.run([sys.executable, tmp_path / "serve.py", rec, cache], env=env,
                         capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"given": 1, "compiled": 0, "loaded": 2, "benchmarks": 0, "ones": True}, got
