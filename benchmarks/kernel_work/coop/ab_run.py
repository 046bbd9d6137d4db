"""Scratch: ragged_topk of this tree (coop one-launch path for few rows) beside HEAD's tree
(scratch/topk_base.py loaded as kernels._topk_base), graph and eager, in one process, with torch.topk."""
import json, os, shutil, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
shutil.copy("scratch/topk_base.py", "kernels/_topk_base.py")
from bench_kernels import graph_bench, bench
import kernels.topk as NEW
import kernels._topk_base as BASE

shapes = [(64, 32768, 512), (8, 32768, 512), (256, 8192, 512), (64, 131072, 2048), (1, 2048, 512),
          (1, 16384, 512), (8, 16384, 512), (16, 16384, 512), (1, 32768, 512), (4, 32768, 512),
          (16, 32768, 512), (32, 32768, 512), (1, 65536, 512), (8, 65536, 512), (1, 65536, 2048),
          (8, 65536, 2048), (16, 65536, 2048), (2, 131072, 2048)]
if os.environ.get("AB_SHAPES"):
    shapes = [tuple(int(x) for x in t.split("x")) for t in os.environ["AB_SHAPES"].split(",")]
res = []
for rows, cols, k in shapes:
    for dist in ("normal", "rounded"):
        torch.manual_seed(rows * 7 + cols)
        logits = torch.randn(rows, cols, device="cuda")
        if dist == "rounded":
            logits = logits.round(decimals=2)
        lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        want = logits.topk(k, dim=1).values
        tt = graph_bench(lambda: torch.topk(logits, k, dim=1)) * 1e3
        row = dict(rows=rows, cols=cols, k=k, dist=dist, torch_us=tt,
                   new_path=NEW.topk_launch_config(cols, k, rows).path)
        for name, mod in (("base", BASE), ("new", NEW)):
            out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
            mod.ragged_topk(logits, lengths, k, out); torch.cuda.synchronize()
            got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
            row[name + "_exact"] = bool(torch.equal(got, want)) and bool((out >= 0).all())
            row[name + "_graph_us"] = graph_bench(lambda: mod.ragged_topk(logits, lengths, k, out)) * 1e3
            row[name + "_eager_us"] = bench(lambda: mod.ragged_topk(logits, lengths, k, out)) * 1e3
            mod.ragged_topk(logits, lengths, k, out); torch.cuda.synchronize()
            got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
            row[name + "_exact"] &= bool(torch.equal(got, want))
        res.append(row)
        print(f"{rows:>5}x{cols:<6} k={k:<5} {dist:<7} {row['new_path']:<6} base {row['base_graph_us']:7.1f} new {row['new_graph_us']:7.1f}"
              f" ({row['new_graph_us']/row['base_graph_us']:.2f}x) eager {row['base_eager_us']:7.1f} {row['new_eager_us']:7.1f}"
              f" torch {tt:7.1f} new/torch {row['new_graph_us']/tt:.3f} exact {row['base_exact']} {row['new_exact']}", flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "ab_coop.json"), "w"), indent=1)
os.remove("kernels/_topk_base.py")
