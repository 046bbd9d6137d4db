"""Scratch: the split top-k's collect-launch warps, side by side with the dispatched config."""
import json, os, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
from bench_kernels import graph_bench
import kernels.topk as T
res = []
for rows, cols, k in [(4096, 32768, 512), (1024, 32768, 512), (256, 32768, 512), (4096, 8192, 512), (1024, 8192, 512),
                      (256, 8192, 512), (64, 32768, 512), (8, 32768, 512), (2048, 4160, 512), (64, 131072, 2048)]:
    torch.manual_seed(1)
    logits = torch.randn(rows, cols, device="cuda")
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    want = logits.topk(k, dim=1).values
    line = f"{rows:>5}x{cols:<6}"
    for name, cfg in T.topk_tuning_configs(cols, k, rows).items():
        if name != "dispatched" and not name.startswith("collect"):
            continue
        out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
        launches = T.ragged_topk_launches(logits, lengths, k, out, cfg)
        for l in launches: l.run()
        torch.cuda.synchronize()
        got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
        exact = bool(torch.equal(got, want))
        g = graph_bench(lambda: [l.run() for l in launches]) * 1e3
        res.append(dict(rows=rows, cols=cols, k=k, design=name, graph_us=g, exact=exact, collect_warps=cfg.collect_warps))
        line += f"  {name}(w{cfg.collect_warps}) {g:.1f}{'' if exact else ' WRONG'}"
    print(line, flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "collect_warps.json"), "w"), indent=1)
