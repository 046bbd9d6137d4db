import sys, dataclasses, torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
from bench_kernels import graph_bench
import kernels.topk as T
for rows, cols, k in [(64, 131072, 2048), (16, 65536, 2048), (8, 131072, 2048), (64, 65536, 1024)]:
    torch.manual_seed(2)
    logits = torch.randn(rows, cols, device="cuda")
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    want = logits.topk(k, dim=1).values
    base = T.topk_launch_config(cols, k, rows)
    line = f"{rows}x{cols} k={k} cands {base.candidates}:"
    for w in (4, 8, 16):
        cfg = dataclasses.replace(base, collect_warps=w)
        out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
        launches = T.ragged_topk_launches(logits, lengths, k, out, cfg)
        for l in launches: l.run()
        got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
        g = graph_bench(lambda: [l.run() for l in launches]) * 1e3
        line += f"  w{w}{'*' if w == base.collect_warps else ''} {g:.1f}{'' if torch.equal(got, want) else ' WRONG'}"
    print(line, flush=True)
