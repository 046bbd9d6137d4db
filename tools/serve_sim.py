"""Play a server on the GPU: K processes (tensor-parallel ranks on one GPU) each call the
startup hook, then run the launchers over a randomized sweep of the envelope with strict mode
``error``, spot-checking results against kernels/reference.py.

    python tools/serve_sim.py --procs 4 --cache-dir DIR [--preset default] --json out.json

Each rank prints one JSON line: the hook's report, compiles seen after warmup (Triton's
compilation listener), launcher calls, and spot-check failures. ``--cache-per-rank`` gives
each rank a folder of its own (``DIR/rank<N>``: separate hosts of a fleet, sharing only the
tier that ``QSA_WARMUP_REMOTE`` names, if any). ``--devices N`` puts rank r on GPU r % N, as a
tensor-parallel server does (each rank sets its device, then ``warmup(device=r)``); without
it every rank shares the current GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def rank_main(args):
    import torch
    from triton import knobs

    import kernels
    import qsa_warmup
    from kernels import reference as ref
    from qsa_warmup.qsa.trace import Inputs, sweep_envelope

    device = args.rank % args.devices if args.devices else None
    if device is not None:
        torch.cuda.set_device(device)
    start = time.perf_counter()
    cache_dir = args.cache_dir
    if args.cache_per_rank:
        cache_dir = os.path.join(cache_dir, f"rank{args.rank}")
    report = qsa_warmup.warmup(args.preset, cache_dir=cache_dir, strict="error", device=device)
    hook_s = time.perf_counter() - start
    after = {"compiles": 0, "cache_file_loads": 0}
    knobs.compilation.listener = lambda **kw: after.__setitem__(
        "compiles" if not kw["cache_hit"] else "cache_file_loads",
        after["compiles" if not kw["cache_hit"] else "cache_file_loads"] + 1,
    )
    cfg = qsa_warmup.load_config(preset=args.preset)
    rng = random.Random(args.rank)
    checks = {"done": 0, "wrong": 0, "first_step_s": None}
    calls = {"n": 0}

    def spot_check(op, a, kw):
        if op is kernels.qsa_select_paged_decode:
            q, k_cache, table, visible, token_topk, ratio, dql, out = a
            rows = list(range(0, q.shape[0], max(1, q.shape[0] // 2)))[:2]
            scores = ref.decode_scores(
                q[rows].cpu(),
                k_cache.cpu(),
                table[[r // dql for r in rows]].cpu(),
                visible[rows].cpu(),
                1,
            )
            want = ref.select_blocks(scores, visible[rows].cpu(), token_topk // ratio)
        elif op is kernels.expand_qsa_block_indices:
            blocks, pos, visible, ratio, token_topk, out = a
            rows = [0, blocks.shape[0] - 1]
            want = ref.expand_block_indices(
                blocks[rows].cpu(), pos[rows].cpu(), visible[rows].cpu(), ratio, token_topk
            )
            return bool(torch.equal(out[rows].cpu().long(), want))
        else:
            return True
        got = out[rows].cpu().long()
        for i, _ in enumerate(rows):  # tie-aware: the selected float64 scores are the best ones
            sel = got[i][got[i] >= 0]
            exp = want[i][want[i] >= 0]
            if len(sel) != len(exp):
                return False
            if len(sel) and not torch.allclose(
                scores[i, sel].sort().values,
                scores[i, exp].sort().values,
                rtol=1e-2 if q.dtype == torch.float8_e4m3fn else 1e-3,
            ):
                return False
        return True

    def run(op, *a, **kw):
        calls["n"] += 1
        op(*a, **kw)
        if checks["first_step_s"] is None:
            torch.cuda.synchronize()
            checks["first_step_s"] = time.perf_counter() - start
        if rng.random() < args.check_rate:
            checks["done"] += 1
            checks["wrong"] += 0 if spot_check(op, a, kw) else 1

    error = None
    try:
        sweep_envelope(
            cfg,
            run,
            seed=args.rank,
            samples=8,
            inputs=Inputs(
                "cuda" if device is None else f"cuda:{device}",
                realistic=True,
                num_blocks=4096,
                seed=args.rank,
            ),
        )
        torch.cuda.synchronize()
    except qsa_warmup.StrictModeError as exc:
        error = str(exc)
    print(
        json.dumps(
            {
                "rank": args.rank,
                "device": report.device,
                "hook_s": hook_s,
                "loaded": report.loaded,
                "compiled_in_hook": report.compiled,
                "fetched_in_hook": report.fetched,
                "remote": report.remote,
                "rebuilt": report.rebuilt,
                "warnings": report.warnings,
                "calls": calls["n"],
                "compiles_after_warmup": after["compiles"],
                "cache_file_loads_after_warmup": after["cache_file_loads"],
                "spot_checks": checks["done"],
                "wrong": checks["wrong"],
                "first_step_s": checks["first_step_s"],
                "strict_error": error,
            }
        ),
        flush=True,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--check-rate", type=float, default=0.02)
    ap.add_argument("--label", default="run")
    ap.add_argument("--json")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--cache-per-rank", action="store_true", help="one cache folder per rank")
    ap.add_argument("--devices", type=int, help="GPUs to spread the ranks over (rank r: r %% N)")
    args = ap.parse_args()
    if args.rank is not None:
        return rank_main(args)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--rank",
                str(r),
                "--preset",
                args.preset,
                "--cache-dir",
                args.cache_dir,
                "--check-rate",
                str(args.check_rate),
            ]
            + (["--cache-per-rank"] if args.cache_per_rank else [])
            + (["--devices", str(args.devices)] if args.devices else []),
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for r in range(args.procs)
    ]
    ranks = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    summary = {
        "label": args.label,
        "procs": args.procs,
        "devices": sorted({r["device"] for r in ranks if r["device"] is not None}),
        "wall_s": time.perf_counter() - start,
        "compiled_in_hooks": sum(r["compiled_in_hook"] for r in ranks),
        "fetched_in_hooks": sum(r["fetched_in_hook"] for r in ranks),
        "compiles_after_warmup": sum(r["compiles_after_warmup"] for r in ranks),
        "cache_file_loads_after_warmup": sum(r["cache_file_loads_after_warmup"] for r in ranks),
        "wrong": sum(r["wrong"] for r in ranks),
        "spot_checks": sum(r["spot_checks"] for r in ranks),
        "calls": sum(r["calls"] for r in ranks),
        "strict_errors": [r["strict_error"] for r in ranks if r["strict_error"]],
        "max_hook_s": max(r["hook_s"] for r in ranks),
        "ranks": ranks,
    }
    print(
        f"{args.label}: {args.procs} ranks, hook <= {summary['max_hook_s']:.2f} s, compiled in "
        f"hooks "
        f"{summary['compiled_in_hooks']}, fetched {summary['fetched_in_hooks']}, "
        f"compiles after warmup "
        f"{summary['compiles_after_warmup']}, cache-file "
        f"loads after warmup {summary['cache_file_loads_after_warmup']}, {summary['calls']} "
        f"launcher calls, "
        f"{summary['wrong']}/{summary['spot_checks']} spot checks wrong, strict errors "
        f"{len(summary['strict_errors'])}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
