"""Build-speed benchmark on one plan, in one run (results: docs/benchmarks.md).

- cold build with --jobs 1 vs --jobs N (target: parallel wall <= 1.3 x serial / N);
- K concurrent `prebuild` processes on one cold cache vs one process (target: each spec
  compiled exactly once in total, wall within 1.2 x the single parallel build);
- for comparison, K processes of Triton alone (each warms every spec, no coordination) on one
  cold cache, counting real compiles with Triton's compilation listener.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_TRITON_ALONE = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import triton
from triton import knobs
from qsa_warmup.qsa.config import load_config
from qsa_warmup.planner import build_plan
from qsa_warmup import triton_compat as tc
n = {"compiled": 0}
def count(**kw):
    n["compiled"] += not kw["cache_hit"]
knobs.compilation.listener = count
plan = build_plan(load_config(preset=sys.argv[2]), sys.argv[3])   # keys only; nothing compiled yet
with tc.active_driver(tc.parse_target(sys.argv[3])):
    for spec in plan.specs:
        spec.launch.warmup()          # Triton's own warmup, Triton's own file cache
print(json.dumps(n))
"""


def _env(cache=None, triton_dir=None):
    env = dict(os.environ, PYTHONPATH=HERE)
    env.pop("TRITON_INTERPRET", None)
    if triton_dir:
        env["TRITON_CACHE_DIR"] = triton_dir
    return env


def _prebuild_cmd(preset, target, cache, jobs):
    cmd = [
        sys.executable,
        "-m",
        "qsa_warmup",
        "prebuild",
        "--preset",
        preset,
        "--target",
        target,
        "--cache-dir",
        cache,
        "--json",
    ]
    return cmd + (["--jobs", str(jobs)] if jobs else [])


def timed_processes(cmds, env):
    start = time.perf_counter()
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        for c in cmds
    ]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    return time.perf_counter() - start, outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="default")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--json", default="bench_build.json")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-build-")
    r = {
        "cores": os.cpu_count(),
        "jobs": args.jobs,
        "procs": args.procs,
        "preset": args.preset,
        "target": args.target,
    }
    # warm the OS page cache for imports, so the first measurement is not penalized
    subprocess.run(
        [
            sys.executable,
            "-m",
            "qsa_warmup",
            "plan",
            "--preset",
            args.preset,
            "--target",
            args.target,
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall, (serial,) = timed_processes(
        [_prebuild_cmd(args.preset, args.target, f"{root}/serial", 1)], _env()
    )
    # "build" is prebuild's own clock (plan, fingerprint, pool and compiles), without the
    # interpreter's start and imports, which are the same for any --jobs
    r["serial"] = {
        "wall": wall,
        "build": serial["seconds"],
        "compiled": serial["compiled"],
        "planned": serial["planned"],
    }
    wall, (par,) = timed_processes(
        [_prebuild_cmd(args.preset, args.target, f"{root}/parallel", args.jobs)], _env()
    )
    r["parallel"] = {"wall": wall, "build": par["seconds"], "compiled": par["compiled"]}
    r["parallel_vs_ideal"] = r["parallel"]["build"] / (r["serial"]["build"] / args.jobs)
    wall, outs = timed_processes(
        [
            _prebuild_cmd(args.preset, args.target, f"{root}/shared", None)
            for _ in range(args.procs)
        ],
        _env(),
    )
    r["concurrent"] = {
        "wall": wall,
        "compiled_total": sum(o["compiled"] for o in outs),
        "per_process": [o["compiled"] for o in outs],
    }
    r["concurrent_vs_parallel"] = wall / r["parallel"]["wall"]
    script = os.path.join(root, "triton_alone.py")
    with open(script, "w") as f:
        f.write(_TRITON_ALONE)
    wall, outs = timed_processes(
        [[sys.executable, script, HERE, args.preset, args.target] for _ in range(args.procs)],
        _env(triton_dir=f"{root}/triton-alone"),
    )
    r["triton_alone_concurrent"] = {
        "wall": wall,
        "compiled_total": sum(o["compiled"] for o in outs),
    }
    with open(args.json, "w") as f:
        json.dump(r, f, indent=1)
    print(
        f"plan: {serial['planned']} specs, {args.jobs} jobs, {args.procs} processes, "
        f"{os.cpu_count()} cores"
    )
    print(
        f"serial (--jobs 1)   {r['serial']['build']:6.1f} s build ({r['serial']['wall']:.1f} s "
        f"wall)  "
        f"compiled {serial['compiled']}"
    )
    print(
        f"parallel (--jobs N) {r['parallel']['build']:6.1f} s build "
        f"({r['parallel']['wall']:.1f} s wall) = "
        f"{r['parallel_vs_ideal']:.2f} x serial/N (target <= 1.3)"
    )
    print(
        f"{args.procs} concurrent      {r['concurrent']['wall']:6.1f} s  = "
        f"{r['concurrent_vs_parallel']:.2f} x parallel (target <= 1.2), compiled "
        f"{r['concurrent']['compiled_total']} "
        f"in total {r['concurrent']['per_process']}"
    )
    print(
        f"Triton alone x{args.procs}    {r['triton_alone_concurrent']['wall']:6.1f} s  compiled "
        f"{r['triton_alone_concurrent']['compiled_total']} in total"
    )


if __name__ == "__main__":
    main()
