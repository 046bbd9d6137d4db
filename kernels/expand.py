"""Expansion of selected compressed blocks into token indices, with the causal tail of the
open group and the trailing count column.

Row r of ``out`` ([rows, token_topk + compress_ratio]): columns ``[0, min(visible, B) * ratio)``
hold ``block * ratio + offset`` for the selected blocks (-1 where the block is -1); then the
``(position + 1) % ratio`` tokens of the open group (at most ratio - 1), then -1 up to column
``token_topk + ratio - 2``. The last column holds the row's valid-entry count (expanded plus
tail): it is not a token index; the sparse attention kernel reads it as the row's loop bound.

Specialization contract: all pointers may be views (no alignment specialization); row strides
are runtime values; constexprs come from the deployment's token_topk and compress_ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._checks import (
    SUPPORTED_POSITION_DTYPES,
    check_same_device,
    check_shape,
    check_tensor,
    check_topk_geometry,
)
from ._fast_launch import remember_prepared
from ._launch import KernelLaunch, call_key, cdiv, next_power_of_2

__all__ = ["ExpandConfig", "expand_launch_config", "expand_launch", "expand_qsa_block_indices"]


@dataclass(frozen=True)
class ExpandConfig:
    column_block: int
    num_warps: int


def expand_launch_config(token_topk: int, compress_ratio: int) -> ExpandConfig:
    """Every launch decision of the expansion kernel (called by the launcher and the planner)."""
    width = token_topk + compress_ratio - 1
    return ExpandConfig(column_block=min(1024, next_power_of_2(width)), num_warps=4)


@triton.jit(
    do_not_specialize=["stride_blocks_row", "stride_out_row"],
    do_not_specialize_on_alignment=[
        "block_indices_ptr",
        "query_positions_ptr",
        "visible_blocks_ptr",
        "out_ptr",
    ],
)
def _expand_kernel(
    block_indices_ptr,
    query_positions_ptr,
    visible_blocks_ptr,
    out_ptr,
    stride_blocks_row,
    stride_out_row,
    BLOCK_TOPK: tl.constexpr,
    COMPRESS_RATIO: tl.constexpr,
    COLUMN_BLOCK: tl.constexpr,
):
    OUTPUT_WIDTH: tl.constexpr = BLOCK_TOPK * COMPRESS_RATIO + COMPRESS_RATIO - 1
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * COLUMN_BLOCK + tl.arange(0, COLUMN_BLOCK)
    position = tl.load(query_positions_ptr + row).to(tl.int32)
    visible = tl.load(visible_blocks_ptr + row)
    expanded_count = tl.minimum(tl.maximum(visible, 0), BLOCK_TOPK) * COMPRESS_RATIO
    tail_start = ((position + 1) // COMPRESS_RATIO) * COMPRESS_RATIO
    tail_count = position + 1 - tail_start
    is_expanded = columns < expanded_count
    block = tl.load(
        block_indices_ptr
        + row * stride_blocks_row
        + tl.minimum(columns // COMPRESS_RATIO, BLOCK_TOPK - 1),
        mask=is_expanded,
        other=-1,
    )
    token = tl.where(
        is_expanded,
        block * COMPRESS_RATIO + columns % COMPRESS_RATIO,
        tail_start + columns - expanded_count,
    )
    is_tail = (columns >= expanded_count) & (columns - expanded_count < tail_count)
    valid = (is_expanded & (block >= 0)) | is_tail
    out_row = out_ptr + row * stride_out_row
    tl.store(out_row + columns, tl.where(valid, token, -1), mask=columns < OUTPUT_WIDTH)
    if tl.program_id(1) == 0:
        tl.store(out_row + OUTPUT_WIDTH, expanded_count + tail_count)


def expand_launch(
    block_indices, query_positions, visible_blocks, compress_ratio, token_topk, out
) -> KernelLaunch:
    block_topk = check_topk_geometry(token_topk, compress_ratio)
    check_tensor("block_indices", block_indices, ndim=2, dtypes=(torch.int32,))
    rows = block_indices.shape[0]
    check_shape("block_indices", block_indices, (rows, block_topk))
    check_tensor("query_positions", query_positions, ndim=1, dtypes=SUPPORTED_POSITION_DTYPES)
    check_shape("query_positions", query_positions, (rows,))
    check_tensor("visible_blocks", visible_blocks, ndim=1, dtypes=(torch.int32,))
    check_shape("visible_blocks", visible_blocks, (rows,))
    check_tensor("out", out, ndim=2, dtypes=(torch.int32,))
    output_width = token_topk + compress_ratio - 1
    # +1: the trailing column holds the row's valid-entry count.
    check_shape("out", out, (rows, output_width + 1))
    for name, t in (("block_indices", block_indices), ("out", out)):
        if t.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension; call .contiguous()")
    for name, t in (("query_positions", query_positions), ("visible_blocks", visible_blocks)):
        if rows > 1 and t.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous; call .contiguous()")
    check_same_device(
        block_indices=block_indices,
        query_positions=query_positions,
        visible_blocks=visible_blocks,
        out=out,
    )
    cfg = expand_launch_config(token_topk, compress_ratio)
    return KernelLaunch(
        _expand_kernel,
        (rows, cdiv(output_width, cfg.column_block)),
        (
            block_indices,
            query_positions,
            visible_blocks,
            out,
            block_indices.stride(0),
            out.stride(0),
        ),
        dict(
            BLOCK_TOPK=block_topk,
            COMPRESS_RATIO=compress_ratio,
            COLUMN_BLOCK=cfg.column_block,
            num_warps=cfg.num_warps,
        ),
    )


def expand_qsa_block_indices(
    block_indices: torch.Tensor,
    query_positions: torch.Tensor,
    visible_blocks: torch.Tensor,
    compress_ratio: int,
    token_topk: int,
    out: torch.Tensor,
) -> None:
    """Expand compressed blocks and compact the causal tail of the open group into ``out``."""
    tensors = (block_indices, query_positions, visible_blocks, out)
    key = call_key(tensors, (compress_ratio, token_topk))
    call, _ = _prepared_expands.get(key, (None, None))
    if call is not None and call.run(tensors):
        return
    launch = expand_launch(
        block_indices, query_positions, visible_blocks, compress_ratio, token_topk, out
    )
    launch.run()
    remember_prepared(_prepared_expands, key, [launch], tensors)


# checked calls by call_key, replayed without their checks and launch choices
_prepared_expands: dict = {}
