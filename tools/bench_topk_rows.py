"""The many-program top-k's choices by row count (GPU; tunes ``topk_launch_config``: where
split rows finish (``SPLIT_FINISH_APART_MIN_ROWS``, ``SPLIT_FINISH_WARPS``), the chunk and the
warps).

For rows x 32K float32 logits (uniform unless ``--logits`` names another kind of
``tools/ab_topk.py``; every row full length), k = 512, side by side in one run: every design
of ``kernels.topk_tuning_configs`` (the dispatched config first). Each is timed in a CUDA
graph (GPU time) and eagerly, and checked exact against torch.topk. Prints a table and writes
JSON. ``--only`` keeps the dispatched config and the designs named (an A/B);
``--rounds N`` times them N times in turn, so that a drift of the GPU's clock reaches each;
``--phases`` also times each design's launches as prefixes (what limits a design: its phases).
Usage:
    python tools/bench_topk_rows.py [--json FILE] [--rows 64,256,...] [--cols 32768] [--k 512]
        [--skip c1024,...] [--only collect.preload,...] [--rounds 1] [--logits uniform] [--phases]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
from ab_topk import LOGITS, make_logits  # noqa: E402
from bench_kernels import bench, graph_bench, save  # noqa: E402

from kernels import ragged_topk_launches, topk_tuning_configs  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="bench_topk_rows.json")
    parser.add_argument("--rows", default="8,64,256,512,1024,2048,4096")
    parser.add_argument("--cols", type=int, default=32768)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--skip", default="", help="designs whose names start so, e.g. c1024,apart")
    parser.add_argument(
        "--only", default="", help="time the dispatched config and designs whose names start so"
    )
    parser.add_argument("--rounds", type=int, default=1, help="times each design is timed, in turn")
    parser.add_argument("--logits", default="uniform", choices=LOGITS, help="their kind")
    parser.add_argument(
        "--phases",
        action="store_true",
        help="also time each design's launches as prefixes (the first, the first two, ...)",
    )
    args = parser.parse_args()
    cols, k = args.cols, args.k
    report = {
        "gpu": torch.cuda.get_device_name(),
        "cols": cols,
        "k": k,
        "logits": args.logits,
        "cases": [],
    }
    for rows in (int(r) for r in args.rows.split(",")):
        torch.manual_seed(rows)
        logits = make_logits(args.logits, rows, cols, "cuda")
        lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        want = torch.topk(logits, k, dim=1).values.sort(dim=1, descending=True).values
        configs = [
            (name, cfg)
            for name, cfg in topk_tuning_configs(cols, k, rows).items()
            if _chosen(name, args.skip, args.only)
        ]
        torch_ms = graph_bench(lambda logits=logits: torch.topk(logits, k, dim=1))
        for round_no, (name, cfg) in ((r, c) for r in range(args.rounds) for c in configs):
            launches = ragged_topk_launches(logits, lengths, k, out, config=cfg)

            def run(launches=launches):
                for launch in launches:
                    launch.run()

            out.fill_(-7)
            graph_ms = graph_bench(run)
            eager_ms = bench(run)
            got = logits.gather(1, out.long()).sort(dim=1, descending=True).values
            case = {
                "rows": rows,
                "name": name,
                "round": round_no,
                "launches": len(launches),
                "graph_ms": graph_ms,
                "eager_ms": eager_ms,
                "torch_graph_ms": torch_ms,
                "graph_ratio": graph_ms / torch_ms,
                "exact": bool(torch.equal(got, want)),
                "config": dataclasses.asdict(cfg),
            }
            if args.phases and len(launches) > 1:
                case["phases"] = _phases(launches)
            report["cases"].append(case)
            print(
                f"{rows:>5} x {cols} {name:>11} ({len(launches)} launches): graph "
                f"{graph_ms * 1e3:8.1f} us "
                f"eager {eager_ms * 1e3:8.1f} us  torch.topk graph {torch_ms * 1e3:8.1f} us "
                f"= {graph_ms / torch_ms:.2f}x exact={case['exact']}",
                flush=True,
            )
            if "phases" in case:
                steps = ", ".join(f"+{p['launch']} {p['graph_us']:.1f}" for p in case["phases"])
                print(f"{'':>20} by phase (graph us of each prefix): {steps}", flush=True)
            save(report, args.json)
        del logits, out, want
        torch.cuda.empty_cache()
    save(report, args.json)


def _phases(launches) -> list[dict]:
    """The CUDA-graph time of each prefix of a design's launches (the first, the first two,
    ...): what each launch adds, where the launches after it never run. Each prefix starts from
    the workspace its first launch sets up, so replays of a prefix stay valid."""
    phases = []
    for end in range(1, len(launches) + 1):

        def run(prefix=launches[:end]):
            for launch in prefix:
                launch.run()

        name = launches[end - 1].kernel_name.removeprefix("_").removesuffix("_kernel")
        phases.append({"launch": name, "graph_us": graph_bench(run) * 1e3})
    return phases


def _chosen(name: str, skip: str, only: str) -> bool:
    def named(names: str) -> bool:
        return any(name.startswith(n) for n in names.split(",") if n)

    if named(skip):
        return False
    return not only or name == "dispatched" or named(only)


if __name__ == "__main__":
    main()
