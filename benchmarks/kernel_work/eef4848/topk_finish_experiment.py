"""Experiment: k-th largest key by radix histograms (BITS a step) against the bisection /
five-way searches: (a) the split path's finishing step at 64 x 32K, (b) the one-program-per-row
single path. GPU timings in CUDA graphs, exact checks against torch.topk."""

import sys
from dataclasses import replace

import torch
import triton
import triton.language as tl

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
from bench_kernels import graph_bench  # noqa: E402

from kernels import topk as T  # noqa: E402


@triton.jit
def _radix_threshold(keys, valid, k, low, BITS: tl.constexpr):
    """(the k-th largest of keys[valid], k minus the count strictly above it), given a key
    low <= it: BITS bits a step, most significant first, over key - low."""
    high = tl.max(tl.where(valid, keys, -2147483648), axis=0).to(tl.int64)
    span = tl.maximum(high - low, 0)
    steps = 1
    for s in tl.static_range(1, (32 + BITS - 1) // BITS + 1):
        steps += (span >> (s * BITS) > 0).to(tl.int32)
    u = keys.to(tl.int64) - low
    prefix = tl.zeros((), tl.int64)
    need = k
    shift = (steps - 1) * BITS
    for _ in range(steps):
        active = valid & ((u >> (shift + BITS)) == prefix)
        digit = ((u >> shift) & ((1 << BITS) - 1)).to(tl.int32)
        hist = tl.histogram(digit, 1 << BITS, mask=active)
        ge = tl.cumsum(hist, axis=0, reverse=True)
        ok = ge >= need
        packed = tl.sum(ok.to(tl.int32) + (tl.where(ok, 0, hist) << 12), axis=0)
        d = (packed & 4095) - 1
        need = need - (packed >> 12)
        prefix = (prefix << BITS) | d.to(tl.int64)
        shift -= BITS
    return (low + prefix).to(tl.int32), need


@triton.jit(do_not_specialize=["stride_out_row", "num_cols", "k", "nchunks"])
def _radix_finish_kernel(
    logits_ptr, lengths_ptr, counts_ptr, bounds_ptr, cands_ptr, out_ptr,
    stride_logits_row, stride_out_row, num_cols, k, nchunks,
    CHUNK: tl.constexpr, CANDIDATES: tl.constexpr, BITS: tl.constexpr,
):
    row = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    if n > k:
        low = T._row_bound(bounds_ptr, row, n, k, nchunks, CHUNK)
        num_cands = tl.load(counts_ptr + row)
        row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
        out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
        slots = tl.arange(0, CANDIDATES)
        in_list = slots < num_cands
        cols = tl.load(cands_ptr + row.to(tl.int64) * CANDIDATES + slots, mask=in_list, other=0,
                       cache_modifier=".cg")
        keys = T._load_keys(row_ptr, cols, n)
        threshold, ties_needed = _radix_threshold(keys, in_list, k, low, BITS)
        above = in_list & (keys > threshold)
        tie = in_list & (keys == threshold)
        n_above = tl.sum(above.to(tl.int32), axis=0)
        tl.store(out_row_ptr + tl.cumsum(above.to(tl.int32), axis=0) - 1, cols, mask=above)
        tie_rank = tl.cumsum(tie.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + n_above + tie_rank, cols, mask=tie & (tie_rank < k - n_above))


@triton.jit(do_not_specialize=["stride_out_row", "num_cols", "k"])
def _radix_row_kernel(
    logits_ptr, lengths_ptr, out_ptr, stride_logits_row, stride_out_row, num_cols, k,
    BLOCK: tl.constexpr, SINGLE: tl.constexpr, OUT_BLOCK: tl.constexpr, BITS: tl.constexpr,
):
    row = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    offsets = tl.arange(0, BLOCK)
    if n <= k:
        T._write_short_row(out_row_ptr, n, k, OUT_BLOCK)
    else:
        keys = T._load_keys(row_ptr, offsets, n)
        valid = offsets < n
        low = tl.min(tl.where(valid, keys, 2147483647), axis=0).to(tl.int64)
        threshold, ties_needed = _radix_threshold(keys, valid, k, low, BITS)
        T._write_selected(row_ptr, out_row_ptr, keys, n, threshold, ties_needed, BLOCK, True)


def run(ls):
    for launch in ls:
        launch.run()


def case(dist, rows, cols, k):
    torch.manual_seed(rows + cols)
    logits = (torch.rand if dist == "rand" else torch.randn)(rows, cols, device="cuda")
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    want = torch.topk(logits, k, dim=1).values.sort(dim=1, descending=True).values

    def exact():
        got = logits.gather(1, out.long()).sort(dim=1, descending=True).values
        return bool(torch.equal(got, want))

    def timed(name, ls, check=True):
        out.fill_(-7)
        us = graph_bench(lambda: run(ls)) * 1e3
        print(f"{dist:>5} {rows:>5} x {cols:<6} {name:<22} {us:8.1f} us  exact={exact() if check else '-'}",
              flush=True)

    print(f"{dist:>5} {rows:>5} x {cols:<6} torch.topk {graph_bench(lambda: torch.topk(logits, k, dim=1)) * 1e3:8.1f} us")
    cfg = T.topk_launch_config(cols, k, rows)
    timed("dispatched", T.ragged_topk_launches(logits, lengths, k, out, config=cfg))
    if cfg.path == "split":
        fused = T.topk_launch_config(cols, k, 1)
        apart = replace(fused, finish_warps=4, collect_warps=fused.num_warps)
        bound, collect, finish = T.ragged_topk_launches(logits, lengths, k, out, config=apart)
        timed("bound", [bound], False)
        timed("bound+collect", [bound, collect], False)
        for w in (4, 8, 16):
            f = replace(finish, options={**finish.options, "num_warps": w})
            run([bound, collect])
            timed(f"finish5 w{w}", [f])
            for bits in (5, 6, 8):
                rf = replace(f, kernel=_radix_finish_kernel, options={**f.options, "BITS": bits})
                timed(f"radix{bits} w{w}", [rf])
                if w == 4:
                    timed(f"apart radix{bits} w{w}", [bound, collect, rf])
    else:
        (one,) = T.ragged_topk_launches(logits, lengths, k, out, config=cfg)
        for w in sorted({cfg.num_warps, 4, 8, 16}):
            for bits in (5, 6, 8):
                rl = replace(one, kernel=_radix_row_kernel,
                             options={**one.options, "num_warps": w, "BITS": bits})
                timed(f"radix{bits} w{w}", [rl])


def main():
    for dist in ("rand", "randn"):
        for rows, cols, k in [(64, 32768, 512), (1, 2048, 512), (64, 2048, 512), (8, 8192, 512),
                              (256, 8192, 512), (1024, 8192, 512)]:
            case(dist, rows, cols, k)


if __name__ == "__main__":
    main()
