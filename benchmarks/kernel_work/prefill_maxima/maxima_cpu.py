"""CPU (TRITON_INTERPRET=1): scratch/maxima_proto.py's maxima equal torch's group maxima of the
order keys (fully visible groups), and the top-k (many-rows split, bound from maxima) is exact."""
import sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "scratch")
from maxima_proto import scores_maxima_kernel, bound_from_maxima_kernel
from kernels import prefill_scores_launch, prefill_logits_layout
from kernels._launch import KernelLaunch
from kernels.topk import checked_topk_call, _split_config

G, PAGE, D, heads = 8, 64, 64, 4
torch.manual_seed(1)
fails = 0
for reqs, new_tokens, ctx_cols, k in ((2, 8, 4096, 64), (1, 8, 6000, 128)):
    ratio = 4
    context = ctx_cols * ratio
    width = -(-ctx_cols // PAGE)
    k_cache = torch.randn(reqs * width, PAGE, 1, D).to(torch.bfloat16)
    rows = reqs * new_tokens
    q = torch.randn(rows, heads, D).to(torch.bfloat16)
    table = torch.randperm(reqs * width).to(torch.int32).view(reqs, width)
    qsl = torch.arange(0, rows + 1, new_tokens, dtype=torch.int32)
    visible = torch.randint(ctx_cols // 2, ctx_cols + 1, (rows,), dtype=torch.int32)
    lw, stride, per_chunk = prefill_logits_layout(context, ratio, width * PAGE, 512)
    logits = torch.full((rows, stride), float("nan"))[:, :lw]
    maxima = torch.full((rows, stride // G), 0x7FFFFFFF, dtype=torch.int32)
    p = prefill_scores_launch(q, k_cache, table, qsl, visible, logits, new_tokens, 0, rows, lw)
    KernelLaunch(scores_maxima_kernel, p.grid, (*p.args[:6], maxima, *p.args[6:], maxima.stride(0)), dict(p.options, GROUP=G)).run()
    bits = logits.contiguous().view(torch.int32)
    keys = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    for r in range(rows):
        full = int(visible[r]) // G
        want = keys[r, : full * G].view(full, G).max(dim=1).values
        if not torch.equal(maxima[r, :full], want):
            fails += 1; print("maxima differ, row", r)
    out = torch.full((rows, k), -7, dtype=torch.int32)
    cfg = _split_config(k, True)
    launches, _, ws = checked_topk_call(logits, visible, k, out, config=cfg)
    b = launches[0]
    lg, lens, counts, bounds, lstride, ncols, kk = b.args
    launches[0] = KernelLaunch(bound_from_maxima_kernel, b.grid, (lg, maxima, lens, counts, bounds, lstride, maxima.stride(0), ncols, kk), dict(b.options, GROUP=G))
    for l in launches:
        l.run()
    col = torch.arange(lw)[None, :]
    masked = torch.where(col < visible[:, None], logits, torch.tensor(float("-inf")))
    ref = masked.topk(k, dim=1).values.sort(dim=1).values
    got = torch.gather(logits, 1, out.clamp(min=0).long()).sort(dim=1).values
    ok = torch.equal(got, ref) and bool((out >= 0).all()) and bool((out.sort(dim=1).values.diff(dim=1) != 0).all())
    print(reqs, new_tokens, ctx_cols, k, cfg.block, cfg.group, "exact", ok, flush=True)
    fails += not ok
print("FAILS", fails)
