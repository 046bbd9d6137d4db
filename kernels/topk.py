"""Ragged top-k in Triton: for each row, the column indices of the k largest of its first
``lengths[r]`` values (any order); rows with ``lengths[r] <= k`` get ``0..lengths[r]-1`` then -1.

Algorithm: map each float32 to an int32 key with the same order, find the k-th largest key
by a 32-step bisection over the key range (each step one count), then write every column
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

__all__ = ["TopkConfig", "topk_launch_config", "ragged_topk_launch", "ragged_topk", "SINGLE_PASS_MAX_COLS"]

SINGLE_PASS_MAX_COLS = 32768
_MIN_BLOCK = 1024
_STREAM_BLOCK = 8192
_OUT_BLOCK = 1024


@dataclass(frozen=True)
class TopkConfig:
    path: str  # "single" or "streaming"
    block: int
    num_warps: int
    out_block: int


def topk_launch_config(num_cols: int) -> TopkConfig:
    """Every launch decision of the ragged top-k (called by the launcher and the planner).

    Widths are bucketed to powers of two, so a deployment reaches a small, known set of
    variants whatever its per-step widths are."""
    if num_cols > SINGLE_PASS_MAX_COLS:
        return TopkConfig("streaming", _STREAM_BLOCK, 16, _OUT_BLOCK)
    block = max(_MIN_BLOCK, triton.next_power_of_2(max(num_cols, 1)))
    return TopkConfig("single", block, max(4, min(16, block // 1024)), _OUT_BLOCK)


@triton.jit
def _order_keys(values):
    # int32 keys whose signed order equals the float order (negatives: flip magnitude bits).
    bits = values.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _count_at_least(row_ptr, keys, n, threshold, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    if SINGLE:
        count = tl.sum(((offsets < n) & (keys >= threshold)).to(tl.int32), axis=0)
    else:
        count = 0
        for start in range(0, n, BLOCK):
            cols = start + offsets
            chunk = _order_keys(tl.load(row_ptr + cols, mask=cols < n, other=0.0))
            count += tl.sum(((cols < n) & (chunk >= threshold)).to(tl.int32), axis=0)
    return count


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
        keys = offsets  # placeholder for the streaming path, which reloads per count
        if SINGLE:
            keys = _order_keys(tl.load(row_ptr + offsets, mask=offsets < n, other=0.0))
        # Bisection invariant: count(key >= lo) >= k > count(key >= hi).
        lo = tl.full((), -2147483648, tl.int64)
        hi = tl.full((), 2147483648, tl.int64)
        for _ in range(32):
            mid = (lo + hi) >> 1
            count = _count_at_least(row_ptr, keys, n, mid.to(tl.int32), BLOCK, SINGLE)
            lo = tl.where(count >= k, mid, lo)
            hi = tl.where(count >= k, hi, mid)
        threshold = lo.to(tl.int32)
        # Columns above the threshold are all taken; ties at it fill the rest, lowest index first.
        ties_needed = k - _count_at_least(row_ptr, keys, n, threshold + 1, BLOCK, SINGLE)
        written = 0
        ties_seen = 0
        for start in range(0, n, BLOCK):
            cols = start + offsets
            in_row = cols < n
            if SINGLE:
                chunk = keys
            else:
                chunk = _order_keys(tl.load(row_ptr + cols, mask=in_row, other=0.0))
            above = in_row & (chunk > threshold)
            tie = in_row & (chunk == threshold)
            tie_rank = tl.cumsum(tie.to(tl.int32), axis=0) + ties_seen
            take = above | (tie & (tie_rank <= ties_needed))
            position = tl.cumsum(take.to(tl.int32), axis=0) - 1 + written
            tl.store(out_row_ptr + position, cols, mask=take)
            written += tl.sum(take.to(tl.int32), axis=0)
            ties_seen += tl.sum(tie.to(tl.int32), axis=0)


def ragged_topk_launch(logits, lengths, k, out, config: TopkConfig | None = None) -> KernelLaunch:
    """The top-k launch; ``config`` overrides :func:`topk_launch_config` (tests)."""
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
    cfg = config or topk_launch_config(num_cols)
    return KernelLaunch(
        _ragged_topk_kernel,
        (rows,),
        (logits, lengths, out, logits.stride(0), out.stride(0), num_cols, k),
        dict(BLOCK=cfg.block, SINGLE=cfg.path == "single", OUT_BLOCK=cfg.out_block, num_warps=cfg.num_warps),
    )


def ragged_topk(logits: torch.Tensor, lengths: torch.Tensor, k: int, out: torch.Tensor) -> None:
    """For each row r: ``out[r]`` = indices of the k largest of ``logits[r, :lengths[r]]`` (any
    order); when ``lengths[r] <= k``, ``0..lengths[r]-1`` then -1. logits float32 [rows, width]
    (rows contiguous, any row stride), lengths int32 [rows] (clamped to [0, width]), out int32
    [rows, k]. Ties are broken towards the lower column index. No host-device synchronization."""
    ragged_topk_launch(logits, lengths, k, out).run()
