"""GPU host A/B in one process: the session-start tree's kernels (scratch/kernels_before, the
tree of 2b3c2b5) against the working tree's, bench_kernels' host cases, alternating rounds."""
import sys, statistics as st
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools"); sys.path.insert(0, "scratch")
import kernels as now_k
import kernels_before as before_k
from bench_kernels import decode_inputs, host_per_call_us


def cases(K):
    q, k_cache, tables, visible = decode_inputs(1, 2048, torch.bfloat16)
    out = torch.empty(1, 512, dtype=torch.int32, device="cuda")
    logits = torch.rand(1, 2048, device="cuda")
    lengths = torch.full((1,), 2048, dtype=torch.int32, device="cuda")
    out64 = torch.empty(64, 512, dtype=torch.int32, device="cuda")
    l64 = torch.rand(64, 32768, device="cuda")
    n64 = torch.full((64,), 32768, dtype=torch.int32, device="cuda")
    return {
        "decode select 1x2K": lambda: K.qsa_select_paged_decode(q, k_cache, tables[0], visible, 2048, 4, 1, out),
        "ragged_topk 1x2K": lambda: K.ragged_topk(logits, lengths, 512, out),
        "ragged_topk 64x32K": lambda: K.ragged_topk(l64, n64, 512, out64),
    }


sides = {"before": cases(before_k), "now": cases(now_k)}
for fns in sides.values():
    for f in fns.values():
        f(); f(); f()
torch.cuda.synchronize()
res = {s: {n: [] for n in sides[s]} for s in sides}
for rnd in range(8):
    for side, fns in sides.items():
        line = []
        for name, f in fns.items():
            t = host_per_call_us(f)
            res[side][name].append(t)
            line.append(f"{name} {t:6.1f} us")
        print(f"round {rnd} {side:6s} " + "  ".join(line), flush=True)
for side in res:
    print("median", side, {n: round(st.median(v), 2) for n, v in res[side].items()})
