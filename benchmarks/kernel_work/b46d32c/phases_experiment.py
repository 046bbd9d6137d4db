"""Scratch: the split top-k's launches timed as prefixes (bound; bound + collect; all) in CUDA graphs."""
import sys, dataclasses
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
from bench_kernels import graph_bench
import kernels.topk as T
for rows, cols, k in [(64, 32768, 512), (8, 32768, 512), (256, 8192, 512), (4096, 32768, 512), (4096, 8192, 512)]:
    torch.manual_seed(0)
    logits = torch.randn(rows, cols, device="cuda")
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    base = T.topk_launch_config(cols, k, rows)
    cfgs = {"dispatched": base}
    if not base.finish_warps:
        cfgs["apart"] = dataclasses.replace(base, finish_warps=4, collect_warps=base.num_warps)
    for name, cfg in cfgs.items():
        launches, sizes, ws = T.checked_topk_call(logits, lengths, k, out, cfg)
        times = []
        for i in range(1, len(launches) + 1):
            times.append(graph_bench(lambda: [l.run() for l in launches[:i]]) * 1e3)
        counts = ws[0][:rows].float()
        print(f"{rows}x{cols} {name:<10} {cfg.block}/{cfg.num_warps}w prefixes " + " ".join(f"{t:.1f}" for t in times)
              + f"  candidates mean {counts.mean():.0f} max {counts.max():.0f} (list {cfg.candidates})", flush=True)
