"""Startup benchmark on a GPU, side by side on one plan (results: docs/benchmarks.md).

Against Triton's default behaviour (no hook: Triton's own `warmup()` per spec, or lazy compile
at first launch), in fresh processes that have already imported torch and the kernels (as a
server has), timing from there:
- cold start, 1 process and K processes on one cold cache: wall and total compiles;
- warm start of the whole plan in a fresh process;
- time to the first completed decode step after start (64 requests, dql 1).

Children write and reuse Python bytecode (one shared PYTHONPYCACHEPREFIX, whatever
PYTHONDONTWRITEBYTECODE says), as an installed server has it: both sides then import Triton's
lazily imported modules and ours from bytecode after the cold runs, not from source.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys, time
if __name__ != "__main__":
    raise SystemExit  # never re-run by a process pool
sys.path.insert(0, sys.argv[1])
mode, preset, cache = sys.argv[2], sys.argv[3], sys.argv[4]
import torch
import kernels
from triton import knobs
from qsa_warmup.config import load_config
from qsa_warmup import triton_compat as tc
torch.cuda.init(); torch.empty(1, device="cuda")
events = {"compiles": 0, "file_loads": 0}
knobs.compilation.listener = lambda **kw: events.__setitem__("compiles" if not kw["cache_hit"] else "file_loads",
    events["compiles" if not kw["cache_hit"] else "file_loads"] + 1)
cfg = load_config(preset=preset)
if mode.startswith("triton"):
    from qsa_warmup.planner import build_plan
    plan = build_plan(cfg, tc.target_name(tc.current_gpu_target()), offline=False)  # the spec list, untimed
    # planning computed Triton's toolchain key; forget it so the timed warm path pays it as Triton does
    import triton.runtime.cache as _rc
    from triton.backends.nvidia import compiler as _nv
    _rc.triton_key.cache_clear()
    _nv.get_ptxas_version.cache_clear()
def first_step():
    g = torch.Generator(device="cuda").manual_seed(0)
    reqs, width = 64, cfg.page_table_width
    k_cache = torch.randn(reqs * width, cfg.page_size, 1, cfg.head_dim, device="cuda", generator=g).bfloat16()
    q = torch.randn(reqs, cfg.num_heads, cfg.head_dim, device="cuda", generator=g).bfloat16()
    table = torch.arange(reqs * width, device="cuda", dtype=torch.int32).view(reqs, width)
    visible = torch.full((reqs,), cfg.num_columns, device="cuda", dtype=torch.int32)
    out = torch.empty(reqs, cfg.block_topk, device="cuda", dtype=torch.int32)
    kernels.qsa_select_paged_decode(q, k_cache, table, visible, cfg.token_topk, cfg.compress_ratio, 1, out)
    torch.cuda.synchronize()
before = dict(events)
t0 = time.perf_counter()
if mode in ("triton-warmup", "triton-warmup-step"):
    for spec in plan.specs:
        tc.init_handles(spec.launch.warmup())
elif mode in ("hook", "hook-step"):
    import qsa_warmup
    qsa_warmup.warmup(preset, cache_dir=cache)
ready = time.perf_counter() - t0
at_ready = dict(events)
if mode.endswith("step") or mode == "triton-lazy-step":
    first_step()
total = time.perf_counter() - t0
print(json.dumps({"mode": mode, "ready_s": ready, "total_s": total, "compiles": events["compiles"],
                  "file_loads": events["file_loads"], "file_loads_after_ready": events["file_loads"] - at_ready["file_loads"],
                  "compiles_after_ready": events["compiles"] - at_ready["compiles"]}))
"""


PYCACHE = os.path.join(tempfile.gettempdir(), "qsa-bench-startup-pycache")


def run(mode, preset, cache, procs=1):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    env.pop("QSA_WARMUP_CACHE_DIR", None)
    if mode.startswith("triton"):
        env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    script = os.path.join(tempfile.gettempdir(), "qsa_bench_startup_child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    start = time.perf_counter()
    ps = [subprocess.Popen([sys.executable, script, ROOT, mode, preset, cache], stdout=subprocess.PIPE, env=env,
                           text=True) for _ in range(procs)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    return {"mode": mode, "procs": procs, "process_wall_s": time.perf_counter() - start,
            "max_ready_s": max(o["ready_s"] for o in outs), "max_total_s": max(o["total_s"] for o in outs),
            "compiles": sum(o["compiles"] for o in outs),
            "compiles_after_ready": sum(o["compiles_after_ready"] for o in outs),
            "file_loads_after_ready": sum(o["file_loads_after_ready"] for o in outs), "each": outs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="default")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--json", default="bench_startup.json")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-startup-")
    fresh = lambda name: os.path.join(root, name)  # noqa: E731
    r = {}
    r["cold1_triton_warmup"] = run("triton-warmup", args.preset, fresh("t1"))
    r["cold1_hook"] = run("hook", args.preset, fresh("h1"))
    r["coldK_triton_warmup"] = run("triton-warmup", args.preset, fresh("tK"), args.procs)
    r["coldK_hook"] = run("hook", args.preset, fresh("hK"), args.procs)
    r["warm_triton_warmup"] = run("triton-warmup", args.preset, fresh("t1"))
    r["warm_hook"] = run("hook", args.preset, fresh("h1"))
    r["first_step_triton_lazy_warm"] = run("triton-lazy-step", args.preset, fresh("t1"))
    r["first_step_triton_lazy_cold"] = run("triton-lazy-step", args.preset, fresh("tcold"))
    r["first_step_triton_warmup_warm"] = run("triton-warmup-step", args.preset, fresh("t1"))
    r["first_step_hook_warm"] = run("hook-step", args.preset, fresh("h1"))
    r["warm_ratio"] = r["warm_hook"]["max_ready_s"] / r["warm_triton_warmup"]["max_ready_s"]
    # the hook leaves Triton's one-time binder import (gluon) to the first launch: compare start
    # plus first decode step too, where both sides have paid it
    r["warm_plus_first_step_ratio"] = (r["first_step_hook_warm"]["max_total_s"]
                                       / r["first_step_triton_warmup_warm"]["max_total_s"])
    r["coldK_vs_cold1_hook"] = r["coldK_hook"]["max_ready_s"] / r["cold1_hook"]["max_ready_s"]
    with open(args.json, "w") as f:
        json.dump(r, f, indent=1)
    for name, v in r.items():
        if isinstance(v, dict):
            print(f"{name:<30} ready {v['max_ready_s']:7.3f} s  total {v['max_total_s']:7.3f} s  procs {v['procs']}  "
                  f"compiles {v['compiles']}  compiles/file loads after ready {v['compiles_after_ready']}/"
                  f"{v['file_loads_after_ready']}")
    print(f"warm start hook / Triton warmup() = {r['warm_ratio']:.3f} (target <= 0.1); with the first decode step "
          f"{r['warm_plus_first_step_ratio']:.3f}; "
          f"cold K={args.procs} / 1 process (hook) = {r['coldK_vs_cold1_hook']:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()
