import json, os, sys
sys.path.insert(0, "."); sys.path.insert(0, "tools")
import torch
from bench_kernels import graph_bench, bench
from kernels.topk import ragged_topk
from scratch.coop import Coop, check, new_state
OUT = os.environ.get("OUT", ".")
print(torch.cuda.get_device_name(), flush=True)
# correctness on ragged rows first
torch.manual_seed(1)
for rows, cols, k in [(37, 40000, 512), (64, 32768, 512), (16, 65536, 2048), (5, 131072, 2048)]:
    for dist in ("normal", "rounded", "const"):
        logits = torch.randn(rows, cols, device="cuda")
        if dist == "rounded": logits = logits.round(decimals=1)
        if dist == "const": logits[::3] = 0.5
        lengths = torch.randint(0, cols + 1, (rows,), dtype=torch.int32, device="cuda")
        lengths[0] = cols; lengths[1] = k; lengths[2] = k + 1
        for chunk, warps, five in ((4096, 8, True), (4096, 8, False), (2048, 4, True)):
            c = Coop(logits, k, chunk=chunk, warps=warps, five=five)
            out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
            c(logits, lengths, k, out); torch.cuda.synchronize()
            b = check(logits, lengths, k, out)
            st = bool((c.state[:, 0] == 2147483647).all() and (c.state[:, 1:] == 0).all())
            print(f"check {rows}x{cols} k={k} {dist} c{chunk}w{warps} five={five}: bad {b} reset {st}", flush=True)
res = []
shapes = [(64, 32768, 512), (8, 32768, 512), (1, 32768, 512), (128, 32768, 512), (16, 65536, 2048),
          (64, 131072, 2048), (8, 16384, 512), (200, 32768, 512)]
for rows, cols, k in shapes:
    for dist in ("normal", "uniform"):
        torch.manual_seed(rows + cols)
        logits = torch.randn(rows, cols, device="cuda") if dist == "normal" else torch.rand(rows, cols, device="cuda")
        lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
        row = dict(rows=rows, cols=cols, k=k, dist=dist)
        row["torch"] = graph_bench(lambda: torch.topk(logits, k, dim=1)) * 1e3
        row["dispatched"] = graph_bench(lambda: ragged_topk(logits, lengths, k, out)) * 1e3
        row["dispatched_ok"] = check(logits, lengths, k, out) == 0 if rows <= 64 else None
        for name, chunk, warps, five in (("c4096.w8.five", 4096, 8, True), ("c4096.w8.halve", 4096, 8, False),
                                         ("c2048.w4.five", 2048, 4, True), ("c4096.w4.five", 4096, 4, True),
                                         ("c8192.w8.five", 8192, 8, True), ("c4096.w16.five", 4096, 16, True)):
            c = Coop(logits, k, chunk=chunk, warps=warps, five=five)
            out.fill_(-7)
            row[name] = graph_bench(lambda: c(logits, lengths, k, out)) * 1e3
            row[name + "_ok"] = check(logits, lengths, k, out) == 0 if rows <= 64 else None
            if name == "c4096.w8.five":
                row["two_launch"] = graph_bench(lambda: c(logits, lengths, k, out, phases=(1, 2))) * 1e3
                row["bound_only"] = graph_bench(lambda: c(logits, lengths, k, out, phases=(1,))) * 1e3
        res.append(row)
        print(" ".join(f"{k_}={v:.1f}" if isinstance(v, float) else f"{k_}={v}" for k_, v in row.items()), flush=True)
json.dump(res, open(os.path.join(OUT, "coop.json"), "w"), indent=1)
