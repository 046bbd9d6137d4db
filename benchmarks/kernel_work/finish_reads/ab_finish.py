"""ragged_topk of this tree (the finish reads its count and list together) beside the tree before
(scratch/topk_base.py loaded as kernels._topk_base), CUDA graphs, alternating rounds."""
import json, os, shutil, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
shutil.copy("scratch/topk_base.py", "kernels/_topk_base.py")
from bench_kernels import graph_bench
import kernels.topk as NEW
import kernels._topk_base as BASE
shapes = [(64, 32768, 512), (8, 32768, 512), (1, 16384, 512), (16, 32768, 512), (256, 8192, 512),
          (1024, 8192, 512), (256, 32768, 512), (4096, 32768, 512), (64, 131072, 2048), (16, 65536, 2048)]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
res = []
for rows, cols, k in shapes:
    torch.manual_seed(rows * 7 + cols)
    logits = torch.rand(rows, cols, device="cuda")
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    want = logits.topk(k, dim=1).values
    row = dict(rows=rows, cols=cols, k=k, base=[], new=[])
    for r in range(rounds):
        for name, mod in (("base", BASE), ("new", NEW)):
            out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
            mod.ragged_topk(logits, lengths, k, out); torch.cuda.synchronize()
            got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
            row[name + "_exact"] = row.get(name + "_exact", True) and bool(torch.equal(got, want)) and bool((out >= 0).all())
            row[name].append(graph_bench(lambda: mod.ragged_topk(logits, lengths, k, out)) * 1e3)
    res.append(row)
    b, n = min(row["base"]), min(row["new"])
    print(f"{rows:>5}x{cols:<6} k={k:<5} base {' '.join(f'{x:.1f}' for x in row['base'])} new {' '.join(f'{x:.1f}' for x in row['new'])}"
          f" best {b:.1f} -> {n:.1f} ({n/b:.3f}x) exact {row['base_exact']} {row['new_exact']}", flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "ab_finish.json"), "w"), indent=1)
