"""Ragged top-k in Triton: for each row, the column indices of the k largest of its first
``lengths[r]`` values (any order); rows with ``lengths[r] <= k`` get ``0..lengths[r]-1`` then -1.

Algorithm: map each float32 to an int32 key with the same order, find the k-th largest key
(8 radix passes of 4-bit digit histograms, or 32 bisection counts), then write every column
whose key is above the threshold plus the lowest-indexed columns equal to it, compacted with a
prefix sum. Rows up to ``SINGLE_PASS_MAX_COLS`` wide stay in registers for all 32 counts
(``single`` path); wider rows stream from memory for each count (``streaming`` path).

Specialization contract: ``num_cols``, ``k`` and the output row stride are runtime values
(``do_not_specialize``); ``lengths`` and ``out`` may be unaligned views (e.g. a prefill chunk's
slice) and are excluded from alignment specialization. The logits row stride and pointer are
specialized; the select paths always pass 16-byte-aligned logits whose row stride is a
multiple of 64 or the fixed decode width. Widths are bucketed by :func:`topk_launch_config`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._checks import check_int, check_same_device, check_shape, check_tensor
from ._launch import KernelLaunch

__all__ = ["TopkConfig", "topk_launch_config", "ragged_topk_launch", "ragged_topk_launches", "ragged_topk",
           "SINGLE_PASS_MAX_COLS", "SPLIT_MIN_COLS"]

SINGLE_PASS_MAX_COLS = 32768
_MIN_BLOCK = 1024
_STREAM_BLOCK = 8192
_OUT_BLOCK = 1024
# split path (tools/bench_kernels.py --sweep, docs/benchmarks.md)
SPLIT_MIN_COLS = 8192  # 256 x 8K: one program per row 44 us, split 70-77 us (H200)
SPLIT_CHUNK = 4096
SPLIT_WARPS = 8


@dataclass(frozen=True)
class TopkConfig:
    path: str  # "single", "streaming" (one program per row) or "split" (a row over many programs)
    block: int
    num_warps: int
    out_block: int
    # threshold search: 8 radix-16 histogram passes, or 32 bisection counts (faster on the H200:
    # 108 vs 123 us at 64 x 32K, docs/benchmarks.md)
    radix: bool = False


def topk_launch_config(num_cols: int) -> TopkConfig:
    """Every launch decision of the ragged top-k (called by the launcher and the planner).

    Rows wider than ``SPLIT_MIN_COLS`` are spread over many programs (``split``: a fixed chunk
    whatever the width); narrower rows take one program each, widths bucketed to powers of two,
    so a deployment reaches a small, known set of variants whatever its per-step widths are."""
    if num_cols > SPLIT_MIN_COLS:
        return TopkConfig("split", SPLIT_CHUNK, SPLIT_WARPS, _OUT_BLOCK)
    if num_cols > SINGLE_PASS_MAX_COLS:
        return TopkConfig("streaming", _STREAM_BLOCK, 16, _OUT_BLOCK)
    block = max(_MIN_BLOCK, triton.next_power_of_2(max(num_cols, 1)))
    return TopkConfig("single", block, max(4, min(32, block // 1024)), _OUT_BLOCK)


@triton.jit
def _order_keys(values):
    # int32 keys whose signed order equals the float order (negatives: flip magnitude bits).
    bits = values.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _load_keys(row_ptr, cols, n):
    return _order_keys(tl.load(row_ptr + cols, mask=cols < n, other=0.0))


@triton.jit
def _count_at_least(row_ptr, keys, n, threshold, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    if SINGLE:
        count = tl.sum(((offsets < n) & (keys >= threshold)).to(tl.int32), axis=0)
    else:
        count = 0
        for start in range(0, n, BLOCK):
            cols = start + offsets
            count += tl.sum(((cols < n) & (_load_keys(row_ptr, cols, n) >= threshold)).to(tl.int32), axis=0)
    return count


@triton.jit
def _digit_histogram(row_ptr, keys, n, prefix, high_mask, shift, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    # Counts of the 4-bit digit at ``shift`` among keys whose higher bits equal ``prefix``
    # (keys and prefix in unsigned order: the sign bit flipped).
    offsets = tl.arange(0, BLOCK)
    if SINGLE:
        unsigned = keys ^ -2147483648
        match = (offsets < n) & ((unsigned & high_mask) == prefix)
        hist = tl.histogram((unsigned >> shift) & 15, 16, mask=match)
    else:
        hist = tl.zeros((16,), tl.int32)
        for start in range(0, n, BLOCK):
            cols = start + offsets
            unsigned = _load_keys(row_ptr, cols, n) ^ -2147483648
            match = (cols < n) & ((unsigned & high_mask) == prefix)
            hist += tl.histogram((unsigned >> shift) & 15, 16, mask=match)
    return hist


@triton.jit
def _kth_largest_radix(row_ptr, keys, n, k, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    """(threshold key, ties to take): 8 passes of 4-bit digits, most significant first."""
    digits = tl.arange(0, 16)
    prefix = tl.full((), 0, tl.int32)
    remaining = k
    for step in range(8):
        shift = 28 - 4 * step
        # bits above this digit; 0 on the first pass
        high_mask = (tl.full((), 0xFFFFFFFF, tl.int64) << (shift + 4)).to(tl.int32)
        hist = _digit_histogram(row_ptr, keys, n, prefix, high_mask, shift, BLOCK, SINGLE)
        at_least = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist  # count(digit >= d)
        chosen = tl.max(tl.where(at_least >= remaining, digits, -1), axis=0)
        remaining -= tl.sum(tl.where(digits > chosen, hist, 0), axis=0)
        prefix = prefix | (chosen << shift)
    return prefix ^ -2147483648, remaining


@triton.jit
def _kth_largest_bisect(row_ptr, keys, n, k, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    """(threshold key, ties to take) by 32 halvings of the key range."""
    # invariant: count(key >= lo) >= k > count(key >= hi)
    lo = tl.full((), -2147483648, tl.int64)
    hi = tl.full((), 2147483648, tl.int64)
    for _ in range(32):
        mid = (lo + hi) >> 1
        count = _count_at_least(row_ptr, keys, n, mid.to(tl.int32), BLOCK, SINGLE)
        lo = tl.where(count >= k, mid, lo)
        hi = tl.where(count >= k, hi, mid)
    threshold = lo.to(tl.int32)
    return threshold, k - _count_at_least(row_ptr, keys, n, threshold + 1, BLOCK, SINGLE)


@triton.jit(do_not_specialize=["stride_out_row", "num_cols", "k"],
            do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"])
def _ragged_topk_kernel(
    logits_ptr,
    lengths_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    RADIX: tl.constexpr,
    OUT_BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    offsets = tl.arange(0, BLOCK)
    if n <= k:
        for start in range(0, k, OUT_BLOCK):
            idx = start + tl.arange(0, OUT_BLOCK)
            tl.store(out_row_ptr + idx, tl.where(idx < n, idx, -1), mask=idx < k)
    else:
        keys = offsets  # the streaming path reloads keys in every pass instead
        if SINGLE:
            keys = _load_keys(row_ptr, offsets, n)
        if RADIX:
            threshold, ties_needed = _kth_largest_radix(row_ptr, keys, n, k, BLOCK, SINGLE)
        else:
            threshold, ties_needed = _kth_largest_bisect(row_ptr, keys, n, k, BLOCK, SINGLE)
        # Columns above the threshold are all taken; ties at it fill the rest, lowest index first.
        written = 0
        ties_seen = 0
        for start in range(0, n, BLOCK):
            cols = start + offsets
            in_row = cols < n
            if SINGLE:
                chunk = keys
            else:
                chunk = _load_keys(row_ptr, cols, n)
            above = in_row & (chunk > threshold)
            tie = in_row & (chunk == threshold)
            tie_rank = tl.cumsum(tie.to(tl.int32), axis=0) + ties_seen
            take = above | (tie & (tie_rank <= ties_needed))
            position = tl.cumsum(take.to(tl.int32), axis=0) - 1 + written
            tl.store(out_row_ptr + position, cols, mask=take)
            written += tl.sum(take.to(tl.int32), axis=0)
            ties_seen += tl.sum(tie.to(tl.int32), axis=0)


# -- split path: one row spread over many programs ------------------------------------------
# The k-th largest key is found digit by digit (4 passes of 8 bits, most significant first);
# each pass is one launch in which every program adds the digit histogram of its chunk of a row
# to that row's histogram in global memory (atomics), so all SMs work on a few long rows. Each
# program re-derives the digits chosen so far from the earlier histograms (256 values each).
# A last launch writes the columns above the threshold and as many ties as needed, placed by
# per-row atomic counters (output order is free).
SPLIT_DIGITS = 4
SPLIT_BINS = 256


@triton.jit
def _split_prefix(hist_row_ptr, k, passes):
    """(prefix of the k-th largest unsigned key in its top 8*passes bits, keys still to take
    at that prefix) from the first ``passes`` digit histograms of a row."""
    digits = tl.arange(0, 256)
    prefix = tl.full((), 0, tl.uint32)
    remaining = k
    for p in range(passes):
        hist = tl.load(hist_row_ptr + p * 256 + digits)
        at_least = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist  # count(digit >= d)
        chosen = tl.max(tl.where(at_least >= remaining, digits, -1), axis=0)
        remaining -= tl.sum(tl.where(digits > chosen, hist, 0), axis=0)
        prefix = prefix | (chosen.to(tl.uint32) << (24 - 8 * p))
    return prefix, remaining


@triton.jit
def _load_unsigned_keys(row_ptr, cols, n):
    # unsigned keys whose order equals the float order
    return (_load_keys(row_ptr, cols, n) ^ -2147483648).to(tl.uint32, bitcast=True)


@triton.jit(do_not_specialize=["num_cols", "k", "digit"],
            do_not_specialize_on_alignment=["lengths_ptr"])
def _split_histogram_kernel(
    logits_ptr,
    lengths_ptr,
    work_ptr,
    stride_logits_row,
    num_cols,
    k,
    digit,
    CHUNK: tl.constexpr,
    WORK_STRIDE: tl.constexpr,
):
    row = tl.program_id(0)
    start = tl.program_id(1) * CHUNK
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    if n > k and start < n:
        hist_row_ptr = work_ptr + row.to(tl.int64) * WORK_STRIDE
        prefix, remaining = _split_prefix(hist_row_ptr, k, digit)
        cols = start + tl.arange(0, CHUNK)
        keys = _load_unsigned_keys(logits_ptr + row.to(tl.int64) * stride_logits_row, cols, n)
        shift = 24 - 8 * digit
        high = (tl.full((), 0xFFFFFFFF, tl.int64) << (shift + 8)).to(tl.uint32)  # 0 on the first digit
        match = (cols < n) & ((keys & high) == prefix)
        hist = tl.histogram(((keys >> shift) & 255).to(tl.int32), 256, mask=match)
        bins = tl.arange(0, 256)
        tl.atomic_add(hist_row_ptr + digit * 256 + bins, hist, mask=hist > 0, sem="relaxed")


@triton.jit(do_not_specialize=["stride_out_row", "num_cols", "k"],
            do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"])
def _split_select_kernel(
    logits_ptr,
    lengths_ptr,
    work_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    CHUNK: tl.constexpr,
    WORK_STRIDE: tl.constexpr,
):
    row = tl.program_id(0)
    start = tl.program_id(1) * CHUNK
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    cols = start + tl.arange(0, CHUNK)
    if n <= k:
        tl.store(out_row_ptr + cols, tl.where(cols < n, cols, -1), mask=cols < k)
    elif start < n:
        hist_row_ptr = work_ptr + row.to(tl.int64) * WORK_STRIDE
        threshold, ties_needed = _split_prefix(hist_row_ptr, k, 4)
        keys = _load_unsigned_keys(logits_ptr + row.to(tl.int64) * stride_logits_row, cols, n)
        in_row = cols < n
        above = in_row & (keys > threshold)
        tie = in_row & (keys == threshold)
        counter_ptr = hist_row_ptr + 4 * 256
        n_above = tl.sum(above.to(tl.int32), axis=0)
        n_tie = tl.sum(tie.to(tl.int32), axis=0)
        above_base = tl.atomic_add(counter_ptr, n_above, sem="relaxed")
        tie_base = tl.atomic_add(counter_ptr + 1, n_tie, sem="relaxed")
        position = above_base + tl.cumsum(above.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + position, cols, mask=above)
        tie_rank = tie_base + tl.cumsum(tie.to(tl.int32), axis=0) - 1
        take = tie & (tie_rank < ties_needed)
        tl.store(out_row_ptr + (k - ties_needed) + tie_rank, cols, mask=take)


def _split_launches(logits, lengths, k, out, cfg: TopkConfig) -> list[KernelLaunch]:
    rows, num_cols = logits.shape
    work_stride = SPLIT_DIGITS * SPLIT_BINS + 2  # 4 histograms, then the two counters
    work = _workspace(logits, rows * work_stride)
    chunks = triton.cdiv(max(num_cols, k), cfg.block)
    common = dict(CHUNK=cfg.block, WORK_STRIDE=work_stride, num_warps=cfg.num_warps)
    launches = [KernelLaunch(_split_histogram_kernel, (rows, chunks),
                             (logits, lengths, work, logits.stride(0), num_cols, k, digit), common)
                for digit in range(SPLIT_DIGITS)]
    launches.append(KernelLaunch(_split_select_kernel, (rows, chunks),
                                 (logits, lengths, work, out, logits.stride(0), out.stride(0), num_cols, k), common))
    return launches


def _workspace(logits, numel):
    from ._launch import TensorMeta

    if isinstance(logits, TensorMeta):  # planning: only dtype and alignment matter
        return TensorMeta((numel,), torch.int32)
    return torch.zeros(numel, dtype=torch.int32, device=logits.device)


def ragged_topk_launches(logits, lengths, k, out, config: TopkConfig | None = None) -> list[KernelLaunch]:
    """Every launch of one ragged top-k, in order; ``config`` overrides
    :func:`topk_launch_config` (tests, benchmarks)."""
    cfg = config or topk_launch_config(logits.shape[1] if len(logits.shape) == 2 else 0)
    if cfg.path == "split":
        _check_topk(logits, lengths, k, out)
        return _split_launches(logits, lengths, k, out, cfg)
    return [ragged_topk_launch(logits, lengths, k, out, cfg)]


def _check_topk(logits, lengths, k, out):
    check_tensor("logits", logits, ndim=2, dtypes=(torch.float32,))
    check_tensor("lengths", lengths, ndim=1, dtypes=(torch.int32,))
    check_tensor("out", out, ndim=2, dtypes=(torch.int32,))
    check_int("k", k, minimum=1)
    rows, num_cols = logits.shape
    check_shape("lengths", lengths, (rows,))
    check_shape("out", out, (rows, k))
    if num_cols > 1 and logits.stride(1) != 1:
        raise ValueError("logits rows must be contiguous (stride(1) == 1); a row stride is fine")
    if rows > 1 and lengths.stride(0) != 1:
        raise ValueError("lengths must be contiguous; call .contiguous()")
    if k > 1 and out.stride(1) != 1:
        raise ValueError("out must be contiguous in its last dimension")
    check_same_device(logits=logits, lengths=lengths, out=out)


def ragged_topk_launch(logits, lengths, k, out, config: TopkConfig | None = None) -> KernelLaunch:
    """The one-program-per-row top-k launch; ``config`` overrides :func:`topk_launch_config`."""
    _check_topk(logits, lengths, k, out)
    rows, num_cols = logits.shape
    cfg = config or topk_launch_config(num_cols)
    if cfg.path == "split":
        raise ValueError("the split path is several launches: use ragged_topk_launches")
    return KernelLaunch(
        _ragged_topk_kernel,
        (rows,),
        (logits, lengths, out, logits.stride(0), out.stride(0), num_cols, k),
        dict(BLOCK=cfg.block, SINGLE=cfg.path == "single", RADIX=cfg.radix, OUT_BLOCK=cfg.out_block,
             num_warps=cfg.num_warps),
    )


def ragged_topk(logits: torch.Tensor, lengths: torch.Tensor, k: int, out: torch.Tensor) -> None:
    """For each row r: ``out[r]`` = indices of the k largest of ``logits[r, :lengths[r]]`` (any
    order); when ``lengths[r] <= k``, ``0..lengths[r]-1`` then -1. logits float32 [rows, width]
    (rows contiguous, any row stride), lengths int32 [rows] (clamped to [0, width]), out int32
    [rows, k]. Ties are broken towards the lower column index. No host-device synchronization."""
    for launch in ragged_topk_launches(logits, lengths, k, out):
        launch.run()
