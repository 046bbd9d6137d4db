import json, os, sys
sys.path.insert(0, "."); sys.path.insert(0, "tools")
import torch
from bench_kernels import graph_bench
from kernels.topk import ragged_topk
from scratch.coop import Coop, check
OUT = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
variants = [("c1024.w4", 1024, 4), ("c2048.w4", 2048, 4), ("c2048.w8", 2048, 8), ("c1024.w8", 1024, 8),
            ("c4096.w8", 4096, 8), ("c2048.w2", 2048, 2), ("c1024.w2", 1024, 2)]
res = []
for cols, k in ((16384, 512), (32768, 512), (65536, 512), (65536, 2048), (131072, 2048)):
    for rows in (1, 2, 4, 8, 16, 32, 64):
        torch.manual_seed(rows + cols)
        logits = torch.randn(rows, cols, device="cuda")
        lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
        row = dict(rows=rows, cols=cols, k=k)
        row["torch"] = graph_bench(lambda: torch.topk(logits, k, dim=1)) * 1e3
        row["dispatched"] = graph_bench(lambda: ragged_topk(logits, lengths, k, out)) * 1e3
        bad = 0
        for name, chunk, warps in variants:
            c = Coop(logits, k, chunk=chunk, warps=warps)
            out.fill_(-7)
            row[name] = graph_bench(lambda: c(logits, lengths, k, out)) * 1e3
            bad += check(logits, lengths, k, out)
        row["bad"] = bad
        res.append(row)
        best = min((row[n], n) for n, _, _ in variants)
        print(f"{rows:>3}x{cols:<6} k={k:<5} torch {row['torch']:6.1f} disp {row['dispatched']:6.1f} best {best[1]} {best[0]:6.1f} "
              f"({best[0]/row['dispatched']:.2f}x disp, {best[0]/row['torch']:.3f}x torch) bad {bad} | "
              + " ".join(f"{n} {row[n]:.1f}" for n, _, _ in variants), flush=True)
json.dump(res, open(os.path.join(OUT, "coop_sweep.json"), "w"), indent=1)
