"""CPU (interpreter) check of scratch/fused_select.py against kernels.reference and the
dispatched decode select: random inputs, poisoned outputs, tie-aware (the selected blocks'
scores as sorted lists), every row; the row states restored. Usage:
TRITON_INTERPRET=1 python3 scratch/fused_select_cpu.py"""
import sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "scratch")
from fused_select import fused_select_launch
from kernels import qsa_select_paged_decode

torch.manual_seed(0)
fails = 0
for reqs, width, page, heads, dim, visible_kind, dtype in [
    (1, 32, 64, 32, 128, "full", torch.bfloat16), (3, 8, 64, 8, 64, "ragged", torch.bfloat16),
    (4, 4, 16, 4, 64, "short", torch.bfloat16), (2, 128, 16, 16, 128, "ragged", torch.bfloat16),
    (5, 16, 64, 32, 128, "ragged", torch.bfloat16), (3, 16, 64, 32, 128, "ragged", torch.float8_e4m3fn),
]:
    cols = width * page
    blocks = reqs * width + 3
    k_cache = torch.randn(blocks, page, 1, dim).to(dtype)
    q = torch.randn(reqs, heads, dim).to(dtype)
    table = torch.randperm(blocks)[: reqs * width].to(torch.int32).view(reqs, width)
    if visible_kind == "full":
        visible = torch.full((reqs,), cols, dtype=torch.int32)
    elif visible_kind == "short":
        visible = torch.randint(0, 200, (reqs,), dtype=torch.int32)
    else:
        visible = torch.randint(0, cols + 1, (reqs,), dtype=torch.int32)
    token_topk, ratio = 2048, 4
    k = token_topk // ratio
    want = torch.full((reqs, k), -7, dtype=torch.int32)
    qsa_select_paged_decode(q, k_cache, table, visible, token_topk, ratio, 1, want)
    got = torch.full((reqs, k), -7, dtype=torch.int32)
    launch, logits, states = fused_select_launch(q, k_cache, table, visible, token_topk, ratio, got)
    before = states.clone()
    launch.run()
    for r in range(reqs):
        n = int(visible[r])
        g, w = got[r], want[r]
        if n <= k:
            ok = torch.equal(g, w)
        else:
            ok = (g >= 0).all() and (g < n).all() and len(set(g.tolist())) == k and torch.equal(
                logits[r][g.long()].sort().values, logits[r][w.long()].sort().values)
        if not ok:
            fails += 1
            print("MISMATCH", reqs, width, page, r, n)
    restored = torch.equal(states, before)
    print(f"{reqs} x {cols} cols ({visible_kind}, {dtype}): rows ok={fails == 0} states restored={restored}", flush=True)
    fails += not restored
print("FAILS", fails)
