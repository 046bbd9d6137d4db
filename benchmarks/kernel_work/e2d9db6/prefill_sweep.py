"""GPU: the prefill scoring kernel's configs beyond the dispatched one (stages, key tile,
warps, query tile, tiles a program), bf16 and fp8, 4 x 2048 new tokens at 128K (bench_kernels'
prefill case), each checked against the dispatched config's logits. Usage:
python3 scratch/prefill_sweep.py"""
import dataclasses, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
from bench_kernels import bench, HEADS, HEAD_DIM, PAGE
from kernels import prefill_launch_config, prefill_logits_layout, prefill_scores_launch

import os
ratio, heads = 4, HEADS
SHAPES = [tuple(int(v) for v in t.split("x")) for t in os.environ.get("SHAPES", "4x2048x131072").split(",")]
KT = os.environ.get("KTILES")
for (reqs, new_tokens, context), dtype in [(sh, dt) for sh in SHAPES for dt in (torch.bfloat16, torch.float8_e4m3fn)]:
    torch.manual_seed(0)
    columns = context // ratio
    width = columns // PAGE
    pages = reqs * width
    k_cache = torch.randn(pages, PAGE, 1, HEAD_DIM, device="cuda").to(dtype)
    rows = reqs * new_tokens
    q = torch.randn(rows, heads, HEAD_DIM, device="cuda").to(dtype)
    page_table = torch.randperm(pages, device="cuda").to(torch.int32).view(reqs, width)
    qsl = torch.arange(0, rows + 1, new_tokens, dtype=torch.int32, device="cuda")
    positions = (context - new_tokens + torch.arange(new_tokens, device="cuda")).repeat(reqs)
    visible = ((positions + 1) // ratio).to(torch.int32)
    flops = float(visible.double().sum()) * heads * HEAD_DIM * 2
    logits_width, stride, rows_per_chunk = prefill_logits_layout(context, ratio, columns, 512)
    chunk = min(rows, rows_per_chunk)
    base = prefill_launch_config(dtype, heads, HEAD_DIM)

    def scoring(cfg, logits):
        launches = [prefill_scores_launch(q, k_cache, page_table, qsl, visible,
                                          logits[: min(chunk, rows - s)], new_tokens, s,
                                          min(chunk, rows - s), logits_width, config=cfg)
                    for s in range(0, rows, chunk)]
        return lambda: [launch.run() for launch in launches]

    ref = torch.full((chunk, stride), float("nan"), device="cuda")[:, :logits_width]
    scoring(base, ref)(); torch.cuda.synchronize()
    ref = ref.clone()
    cfgs = [base]
    grid = [(8, 64, st, w, kt) for st in (2, 3, 4) for w in (8, 4) for kt in (16, 32)]
    grid += [(4, bn, st, w, 16) for bn in (64, 128) for st in (2, 3) for w in (4, 8)]
    if KT:
        grid = [(8, 64, 2, 8, int(kt)) for kt in KT.split(",")] + [(4, 64, 2, 4, int(kt)) for kt in KT.split(",")]
    for tile_r, block_n, stages, warps, k_tiles in grid:
        cfg = dataclasses.replace(base, tile_r=tile_r, block_n=block_n, num_stages=stages,
                                  num_warps=warps, k_tiles=k_tiles)
        if cfg != base:
            cfgs.append(cfg)
    res = []
    for cfg in cfgs:
        logits = torch.full((chunk, stride), float("nan"), device="cuda")[:, :logits_width]
        try:
            fn = scoring(cfg, logits)
            fn(); torch.cuda.synchronize()
            # the last chunk's rows are what logits holds; compare them with the base's
            seen = ref.isfinite()
            err = float((logits - ref).abs()[seen].max() / ref.abs()[seen].max())
            if not torch.equal(logits.isfinite(), seen):
                err = float("inf")  # another set of columns written
            ms = bench(fn, rep=100)
        except Exception as exc:  # noqa: BLE001
            print(str(dtype), cfg, "failed", type(exc).__name__, str(exc)[:100], flush=True)
            continue
        res.append((ms, cfg, err))
        print(f"{reqs}x{new_tokens}@{context} {str(dtype):>20} tile_r {cfg.tile_r} block_n {cfg.block_n} stages {cfg.num_stages} warps {cfg.num_warps} "
              f"k_tiles {cfg.k_tiles}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s err {err:.1e}"
              f"{' (dispatched)' if cfg == base else ''}", flush=True)
    res.sort(key=lambda r: r[0])
    print("best", f"{reqs}x{new_tokens}@{context}", str(dtype), [(round(m, 3), c.tile_r, c.block_n, c.num_stages, c.num_warps, c.k_tiles, e) for m, c, e in res[:5]], flush=True)
