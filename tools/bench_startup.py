"""Startup benchmark on a GPU, side by side on one plan (results: docs/benchmarks.md).

Against Triton's default behaviour (no hook: Triton's own `warmup()` per spec, or lazy compile
at first launch), in fresh processes that have already imported torch and the kernels (as a
server has), timing from there:
- cold start, 1 process and K processes on one cold cache: wall and total compiles;
- warm start of the whole plan in a fresh process;
- time to the first completed decode step after start (64 requests, dql 1).

Triton's side gets the plan's launches as a list written by hand would give them (built before
its timer from the envelope points, with no Triton state touched), so its timed part pays what
a fresh process pays: the driver's start, the binder's first call, kernel hashing, the files.

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
from qsa_warmup.qsa.config import load_config
from qsa_warmup import triton_compat as tc
torch.cuda.init(); torch.empty(1, device="cuda")
events = {"compiles": 0, "file_loads": 0}
def count(**kw):
    events["file_loads" if kw["cache_hit"] else "compiles"] += 1
knobs.compilation.listener = count
cfg = load_config(preset=preset)
if mode.startswith("triton"):
    # Triton's own warm path is given the spec list as a server would write it by hand: the
    # launches, built here (untimed) from the envelope points the parent's plan listed, with no
    # Triton state touched (no driver, binder or kernel hash), so the timed part pays all of it
    from qsa_warmup.qsa.planning import launch_for
    with open(sys.argv[5]) as f:
        launches = [launch_for(cfg, family, tuple(point)) for family, point in json.load(f)]
if mode == "triton-warmup-started":
    # the previous baseline, for comparison: the plan bound in this process first, which starts
    # Triton's driver, builds its binders (importing gluon) and hashes the kernels, untimed;
    # then only triton_key and the ptxas version are forgotten
    from qsa_warmup.planner import build_plan
    build_plan(cfg, tc.target_name(tc.current_gpu_target()), offline=False)
    import triton.runtime.cache as _rc
    from triton.backends.nvidia import compiler as _nv
    _rc.triton_key.cache_clear()
    _nv.get_ptxas_version.cache_clear()
def first_step():
    g = torch.Generator(device="cuda").manual_seed(0)
    reqs, width = 64, cfg.page_table_width
    k_cache = torch.randn(reqs * width, cfg.page_size, 1, cfg.head_dim, device="cuda", generator=g)
    k_cache = k_cache.bfloat16()
    q = torch.randn(reqs, cfg.num_heads, cfg.head_dim, device="cuda", generator=g).bfloat16()
    table = torch.arange(reqs * width, device="cuda", dtype=torch.int32).view(reqs, width)
    visible = torch.full((reqs,), cfg.num_columns, device="cuda", dtype=torch.int32)
    out = torch.empty(reqs, cfg.block_topk, device="cuda", dtype=torch.int32)
    ratio = cfg.compress_ratio
    kernels.qsa_select_paged_decode(q, k_cache, table, visible, cfg.token_topk, ratio, 1, out)
    torch.cuda.synchronize()
before = dict(events)
t0 = time.perf_counter()
if mode in ("triton-warmup", "triton-warmup-step", "triton-warmup-started"):
    for launch in launches:
        tc.init_handles(launch.warmup())
elif mode in ("hook", "hook-step"):
    import qsa_warmup
    qsa_warmup.warmup(preset, cache_dir=cache)
ready = time.perf_counter() - t0
at_ready = dict(events)
if mode.endswith("step") or mode == "triton-lazy-step":
    first_step()
total = time.perf_counter() - t0
print(json.dumps({"mode": mode, "ready_s": ready, "total_s": total, "compiles": events["compiles"],
                  "file_loads": events["file_loads"],
                  "file_loads_after_ready": events["file_loads"] - at_ready["file_loads"],
                  "compiles_after_ready": events["compiles"] - at_ready["compiles"]}))
"""


PYCACHE = os.path.join(tempfile.gettempdir(), "qsa-bench-startup-pycache")


def write_points(preset: str) -> str:
    """The plan's envelope points, [(family, point)], for the Triton-side children."""
    from qsa_warmup import triton_compat as tc
    from qsa_warmup.planner import build_plan
    from qsa_warmup.qsa.config import load_config

    plan = build_plan(
        load_config(preset=preset), tc.target_name(tc.current_gpu_target()), offline=True
    )
    path = os.path.join(tempfile.gettempdir(), f"qsa_bench_startup_points_{preset}.json")
    with open(path, "w") as f:
        json.dump([(s.family, list(s.point)) for s in plan.specs], f)
    return path


def run(mode, preset, cache, procs=1, points=""):
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
    ps = [
        subprocess.Popen(
            [sys.executable, script, ROOT, mode, preset, cache, points],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(procs)
    ]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in ps]
    return {
        "mode": mode,
        "procs": procs,
        "process_wall_s": time.perf_counter() - start,
        "max_ready_s": max(o["ready_s"] for o in outs),
        "max_total_s": max(o["total_s"] for o in outs),
        "compiles": sum(o["compiles"] for o in outs),
        "compiles_after_ready": sum(o["compiles_after_ready"] for o in outs),
        "file_loads_after_ready": sum(o["file_loads_after_ready"] for o in outs),
        "each": outs,
    }


CASES = ("cold", "warm", "step")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="default")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument(
        "--cases",
        default=",".join(CASES),
        help="comma-separated subset of cold, warm, step (warm and step build their caches "
        "untimed)",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="warm and step runs per mode (the best is kept)"
    )
    ap.add_argument("--json", default="bench_startup.json")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    if not cases <= set(CASES):
        ap.error(f"--cases: unknown {sorted(cases - set(CASES))}; choose from {', '.join(CASES)}")
    points = write_points(args.preset)
    root = tempfile.mkdtemp(prefix="bench-startup-")
    fresh = lambda name: os.path.join(root, name)  # noqa: E731

    def best(mode, cache):
        runs = [run(mode, args.preset, cache, points=points) for _ in range(args.repeat)]
        return min(runs, key=lambda r: r["max_total_s"])

    r = {}
    # the one-process cold runs also build the caches the warm and step runs start from
    r["cold1_triton_warmup"] = run("triton-warmup", args.preset, fresh("t1"), points=points)
    r["cold1_hook"] = run("hook", args.preset, fresh("h1"), points=points)
    if "cold" in cases:
        r["coldK_triton_warmup"] = run(
            "triton-warmup", args.preset, fresh("tK"), args.procs, points
        )
        r["coldK_hook"] = run("hook", args.preset, fresh("hK"), args.procs, points)
    if "warm" in cases:
        r["warm_triton_warmup"] = best("triton-warmup", fresh("t1"))
        r["warm_triton_warmup_driver_started"] = best("triton-warmup-started", fresh("t1"))
        r["warm_hook"] = best("hook", fresh("h1"))
        r["warm_ratio"] = r["warm_hook"]["max_ready_s"] / r["warm_triton_warmup"]["max_ready_s"]
        r["warm_ratio_vs_driver_started"] = (
            r["warm_hook"]["max_ready_s"] / r["warm_triton_warmup_driver_started"]["max_ready_s"]
        )
    if "step" in cases:
        r["first_step_triton_lazy_warm"] = best("triton-lazy-step", fresh("t1"))
        r["first_step_triton_lazy_cold"] = run(
            "triton-lazy-step", args.preset, fresh("tcold"), points=points
        )
        r["first_step_triton_warmup_warm"] = best("triton-warmup-step", fresh("t1"))
        r["first_step_hook_warm"] = best("hook-step", fresh("h1"))
        r["warm_plus_first_step_ratio"] = (
            r["first_step_hook_warm"]["max_total_s"]
            / r["first_step_triton_warmup_warm"]["max_total_s"]
        )
    if "cold" in cases:
        r["coldK_vs_cold1_hook"] = r["coldK_hook"]["max_ready_s"] / r["cold1_hook"]["max_ready_s"]
    with open(args.json, "w") as f:
        json.dump(r, f, indent=1)
    for name, v in r.items():
        if isinstance(v, dict):
            print(
                f"{name:<30} ready {v['max_ready_s']:7.3f} s  total {v['max_total_s']:7.3f} s  "
                f"procs {v['procs']}  "
                f"compiles {v['compiles']}  compiles/file loads after ready "
                f"{v['compiles_after_ready']}/"
                f"{v['file_loads_after_ready']}"
            )
    if "warm_ratio" in r:
        print(
            f"warm start hook / Triton warmup() = {r['warm_ratio']:.3f} (target <= 0.1); "
            f"against Triton with its "
            f"driver, binders and kernel hashes made before the timer: "
            f"{r['warm_ratio_vs_driver_started']:.3f}"
        )
    if "warm_plus_first_step_ratio" in r:
        print(f"with the first decode step: {r['warm_plus_first_step_ratio']:.3f}")
    if "coldK_vs_cold1_hook" in r:
        print(
            f"cold K={args.procs} / 1 process (hook) = {r['coldK_vs_cold1_hook']:.2f} (target "
            f"<= 1.2)"
        )


if __name__ == "__main__":
    main()
