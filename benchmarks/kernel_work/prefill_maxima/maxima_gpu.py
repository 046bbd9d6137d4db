"""GPU: scratch/maxima_proto.py at the prefill select's shape (4 x 2048 new tokens at 128K,
32 heads x 128, k = 512; two 4096-row logits chunks), bf16 and fp8: scoring with and without
the maxima, the bound launch from maxima vs from logits, the top-k exact (tie-aware) with the
maxima's bounds, and the whole select (scoring + top-k, both chunks) each way, alternating."""
import sys, statistics as st
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools"); sys.path.insert(0, "scratch")
from maxima_proto import scores_maxima_kernel, bound_from_maxima_kernel
from bench_kernels import bench, HEAD_DIM, PAGE
from kernels import prefill_launch_config, prefill_logits_layout, prefill_scores_launch, qsa_select_paged_prefill
from kernels._launch import KernelLaunch, cdiv
from kernels.topk import checked_topk_call

G = 8
reqs, new_tokens, context, ratio, heads = 4, 2048, 131072, 4, 32
columns = context // ratio
k = 2048 // ratio
for dtype in (torch.bfloat16, torch.float8_e4m3fn):
    torch.manual_seed(0)
    width = columns // PAGE
    k_cache = torch.randn(reqs * width, PAGE, 1, HEAD_DIM, device="cuda").to(dtype)
    rows = reqs * new_tokens
    q = torch.randn(rows, heads, HEAD_DIM, device="cuda").to(dtype)
    table = torch.randperm(reqs * width, device="cuda").to(torch.int32).view(reqs, width)
    qsl = torch.arange(0, rows + 1, new_tokens, dtype=torch.int32, device="cuda")
    positions = (context - new_tokens + torch.arange(new_tokens, device="cuda")).repeat(reqs)
    visible = ((positions + 1) // ratio).to(torch.int32)
    lw, stride, per_chunk = prefill_logits_layout(context, ratio, columns, 512)
    chunk = min(rows, per_chunk)
    logits = torch.empty(chunk, stride, device="cuda")[:, :lw]
    maxima = torch.empty(chunk, stride // G, dtype=torch.int32, device="cuda")
    out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
    cfg = prefill_launch_config(dtype, heads, HEAD_DIM)

    def plain_scoring(s):
        return prefill_scores_launch(q, k_cache, table, qsl, visible, logits[: min(chunk, rows - s)], new_tokens, s, min(chunk, rows - s), lw)

    def maxima_scoring(s):
        p = plain_scoring(s)
        args = (*p.args[:6], maxima, *p.args[6:], maxima.stride(0))
        return KernelLaunch(scores_maxima_kernel, p.grid, args, dict(p.options, GROUP=G))

    def topk_launches(s, with_maxima):
        n = min(chunk, rows - s)
        launches, layout, ws = checked_topk_call(logits[:n], visible[s:s + n], k, out[s:s + n])
        if with_maxima:
            b = launches[0]
            lg, lens, counts, bounds, lstride, ncols, kk = b.args
            launches = [KernelLaunch(bound_from_maxima_kernel, b.grid,
                                     (lg, maxima, lens, counts, bounds, lstride, maxima.stride(0), ncols, kk),
                                     dict(b.options, GROUP=G)), *launches[1:]]
        return launches

    print(dtype, "topk config:", [l.kernel.fn.__name__ if hasattr(l.kernel, 'fn') else l.kernel for l in topk_launches(0, False)], topk_launches(0, False)[0].options, flush=True)
    # exactness: chunk by chunk, scoring with maxima, top-k with the maxima's bounds
    for s in range(0, rows, chunk):
        n = min(chunk, rows - s)
        maxima.fill_(0x7FFFFFFF)
        maxima_scoring(s).run()
        want_logits = torch.empty_like(logits); want_logits.copy_(logits)
        plain_scoring(s).run()
        same_logits = torch.equal(torch.nan_to_num(logits[:n]), torch.nan_to_num(want_logits[:n]))
        out[s:s + n].fill_(-7)
        for l in topk_launches(s, True):
            l.run()
        lg = logits[:n].clone()
        vis = visible[s:s + n].clamp(max=lw)
        col = torch.arange(lw, device="cuda")[None, :]
        masked = torch.where(col < vis[:, None], lg, torch.tensor(float("-inf"), device="cuda"))
        ref_vals = masked.topk(k, dim=1).values.sort(dim=1).values
        got = out[s:s + n]
        ok_idx = bool(((got >= 0) & (got < vis[:, None])).all())
        got_vals = torch.gather(lg, 1, got.clamp(min=0).long()).sort(dim=1).values
        distinct = bool((got.sort(dim=1).values.diff(dim=1) != 0).all())
        print(f"chunk {s}: logits equal {same_logits}; top-k exact (values, tie-aware) {torch.equal(got_vals, ref_vals) and ok_idx and distinct}", flush=True)
    # timings, alternating
    def select(with_maxima):
        launches = []
        for s in range(0, rows, chunk):
            launches.append(maxima_scoring(s) if with_maxima else plain_scoring(s))
            launches += topk_launches(s, with_maxima)
        return lambda: [l.run() for l in launches]
    parts = {
        "scoring plain": lambda: [plain_scoring(s).run() for s in range(0, rows, chunk)],
        "scoring+maxima": lambda: [maxima_scoring(s).run() for s in range(0, rows, chunk)],
    }
    b_plain = topk_launches(0, False)[0]; b_max = topk_launches(0, True)[0]
    parts["bound from logits (1 chunk)"] = b_plain.run
    parts["bound from maxima (1 chunk)"] = b_max.run
    parts["select now (launches)"] = select(False)
    parts["select with maxima"] = select(True)
    parts["qsa_select_paged_prefill"] = lambda: qsa_select_paged_prefill(q, k_cache, table, qsl, visible, 2048, ratio, new_tokens, out, context)
    for f in parts.values():
        f()
    torch.cuda.synchronize()
    res = {n: [] for n in parts}
    for rnd in range(3):
        for name, f in parts.items():
            res[name].append(bench(f, rep=100) * 1e3)
    for name, v in res.items():
        print(f"{str(dtype):22s} {name:30s} median {st.median(v):9.1f} us  rounds {[round(x, 1) for x in v]}", flush=True)
