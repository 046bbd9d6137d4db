"""GPU: ragged_topk of the tree beside each variant of scratch/topk_variants.py, CUDA graphs
(an eager call first, so captured coop calls take set-up rows from the pool), every result
checked exact (tie-aware), normal and rounded logits. Usage: python3 scratch/ab_variants.py [NAMES]"""
import json, os, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools"); sys.path.insert(0, "scratch")
from bench_kernels import graph_bench
import kernels.topk as TREE
import topk_variants as V
names = sys.argv[1:] or ["bound5s6", "bound5s7"]
mods = {"tree": TREE, **{n: V.load(n) for n in names}}
shapes = [(1, 16384, 512), (8, 32768, 512), (16, 32768, 512), (64, 32768, 512), (256, 8192, 512),
          (8, 65536, 2048), (64, 131072, 2048), (1024, 32768, 512), (4096, 32768, 512)]
if os.environ.get("AB_SHAPES"):
    shapes = [tuple(int(x) for x in t.split("x")) for t in os.environ["AB_SHAPES"].split(",")]
res = []
for rows, cols, k in shapes:
    for dist in os.environ.get("AB_DISTS", "normal,rounded").split(","):
        torch.manual_seed(rows * 7 + cols)
        x = torch.randn(rows, cols, device="cuda")
        if dist == "rounded":
            x = x.round(decimals=2)
        if dist == "uniform":
            x = torch.rand(rows, cols, device="cuda")
        if dist == "relu8":  # sum over 8 heads of relu(normal): the indexer's logits' shape
            x = torch.zeros(rows, cols, device="cuda")
            for _ in range(8):
                x += torch.randn(rows, cols, device="cuda").relu_()
        n = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        want = x.topk(k, dim=1).values
        row = dict(rows=rows, cols=cols, k=k, dist=dist, path=TREE.topk_launch_config(cols, k, rows).path,
                   torch_us=graph_bench(lambda: torch.topk(x, k, dim=1)) * 1e3)
        for name, mod in mods.items():
            out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
            mod.ragged_topk(x, n, k, out); torch.cuda.synchronize()
            ok = torch.equal(x.gather(1, out.long().clamp(min=0)).sort(1, descending=True).values, want)
            row[name] = graph_bench(lambda: mod.ragged_topk(x, n, k, out)) * 1e3
            out.fill_(-7); mod.ragged_topk(x, n, k, out); torch.cuda.synchronize()
            ok &= torch.equal(x.gather(1, out.long().clamp(min=0)).sort(1, descending=True).values, want)
            row[name + "_exact"] = bool(ok)
        res.append(row)
        print(f"{rows:>5}x{cols:<6} k={k:<5} {dist:<7} {row['path']:<5} torch {row['torch_us']:7.1f} "
              + " ".join(f"{n} {row[n]:7.1f}{'' if row[n + '_exact'] else ' WRONG'}" for n in mods), flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "ab_variants.json"), "w"), indent=1)
