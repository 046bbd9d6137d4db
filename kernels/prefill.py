"""Prefill scoring and select: packed prefill rows scored in row chunks bounded by a logits budget.

A program scores ``TILE_R`` consecutive rows of one request against ``K_TILES`` tiles of
``BLOCK_N`` columns. Tile sizes come from :func:`prefill_launch_config`, sized from heads,
head_dim and dtype so that every variant fits the target's shared memory.

Specialization contract: row counts, chunk offsets, widths and strides are runtime values
(``do_not_specialize``), so chunking and ``max_seq_len`` never multiply variants;
``page_table``, ``query_start_loc`` and ``visible_blocks`` may be unaligned views and are
excluded from alignment specialization. The kernel indexes rows from base pointers plus the
chunk's ``row_offset`` (no sliced pointers), and ``query_start_loc`` may have a non-zero base.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import limits
from ._checks import (
    check_block_indices,
    check_int,
    check_same_device,
    check_scoring_inputs,
    check_shape,
    check_tensor,
    check_topk_geometry,
)
from ._launch import KernelLaunch, cdiv, device_arch, interpreting, next_power_of_2
from ._scoring import load_query_tile, score_columns
from .topk import checked_topk_launches

__all__ = [
    "PrefillConfig",
    "prefill_launch_config",
    "prefill_logits_layout",
    "prefill_scores_launch",
    "qsa_select_paged_prefill",
    "DEFAULT_MAX_LOGITS_MB",
    "SHARED_MEMORY_BUDGET",
    "shared_memory_budget",
]

DEFAULT_MAX_LOGITS_MB = 512
# Shared memory one prefill program may plan for: under the H100/H200's 227 KB, with room
# for the compiler's own scratch (the same room is left on targets with less).
SHARED_MEMORY_BUDGET = 200 * 1024
_COMPILER_SCRATCH = 227 * 1024 - SHARED_MEMORY_BUDGET
_MAX_QUERY_TILE = 256
_LOGITS_ROW_ALIGN = 64
# fp8 products accumulated per promotion to fp32 in prefill. Prefill is compute-bound: one
# promotion per 128-deep dot (Triton's sm_90 default) ran at 812 TFLOP/s on the H200, full
# promotion (32) at 453 (tools/bench_kernels.py --sweep); the extra error (~3e-3 relative) is
# far below the e4m3 quantization of q and k themselves.
PREFILL_FP8_IMPRECISE_ACC = 128
# Key tiles one program scores for its query tile (block_n keys each), by cache element size:
# fewer, longer programs reuse the query operand over more keys. H100, tile_r 8, 8 warps,
# 4 x 2048 new tokens at 128K, 1 x 2048 at 32K, 4 x 512 at 16K, 1 x 8192 at 128K, 16 x 256 at
# 64K (benchmarks/kernel_work/e2d9db6/prefill_ktiles.txt and, for 256 and 512 tiles,
# benchmarks/kernel_work/ktiles_256/prefill_ktiles.txt): bf16 256 tiles 3.907 / 0.242 / 0.130 /
# 3.815 / 1.025 ms against 128 tiles 3.950 / 0.244 / 0.131 / 3.895 / 1.031 (512 lost at every
# shape); fp8 32 tiles 2.56 / 0.170 / 0.097 / 2.49 / 0.672 against 16 tiles 2.62 / 0.173 /
# 0.094 / 2.58 / 0.691 (128 tiles lost at 1 x 8192: 2.84).
PREFILL_K_TILES = {1: 32, 2: 256}


@dataclass(frozen=True)
class PrefillConfig:
    tile_r: int
    heads_pad: int
    block_n: int
    k_tiles: int
    num_warps: int
    num_stages: int
    dot_fp32: bool
    imprecise_acc: int  # fp8 only: products accumulated before promotion to fp32


def _planned_shared_bytes(
    tile_width: int, block_d: int, block_n: int, stages: int, itemsize: int
) -> int:
    # query operand + pipelined key tiles + the fp32 score tile's layout conversion
    return (
        block_d * tile_width * itemsize
        + stages * block_n * block_d * itemsize
        + block_n * tile_width * 4
    )


def shared_memory_budget(arch: int | None) -> int:
    """Shared memory a prefill program may plan for on ``arch`` (None: an sm_90-class GPU)."""
    available = limits.shared_memory_per_block(arch) if arch is not None else None
    if available is None:
        return SHARED_MEMORY_BUDGET
    return min(SHARED_MEMORY_BUDGET, available - _COMPILER_SCRATCH)


def prefill_launch_config(
    cache_dtype: torch.dtype, num_heads: int, head_dim: int, arch: int | None = None
) -> PrefillConfig:
    """Every launch decision of the prefill scoring kernel (called by the launcher and the
    planner). ``arch``: the target's compute capability (tiles shrink where shared memory is
    smaller); None for an sm_90-class GPU."""
    budget = shared_memory_budget(arch)
    itemsize = 1 if cache_dtype == torch.float8_e4m3fn else 2
    block_d = max(16, next_power_of_2(head_dim))
    heads_pad = next_power_of_2(num_heads)
    block_n, stages = 64, 2
    tile_r = max(1, min(128, _MAX_QUERY_TILE // heads_pad))
    while (
        tile_r > 1
        and _planned_shared_bytes(tile_r * heads_pad, block_d, block_n, stages, itemsize) > budget
    ):
        tile_r //= 2
    heads_pad = max(heads_pad, 16 // tile_r)
    tile_width = tile_r * heads_pad
    num_warps = 8 if tile_width >= 256 else 4
    return PrefillConfig(
        tile_r=tile_r,
        heads_pad=heads_pad,
        block_n=block_n,
        k_tiles=PREFILL_K_TILES[itemsize],
        num_warps=num_warps,
        num_stages=stages,
        dot_fp32=interpreting() and cache_dtype == torch.bfloat16,
        imprecise_acc=min(PREFILL_FP8_IMPRECISE_ACC, block_d) if itemsize == 1 else 0,
    )


def prefill_logits_layout(
    max_seq_len: int, compress_ratio: int, num_columns: int, max_logits_mb: float
) -> tuple[int, int, int]:
    """(logits_width, row_stride, rows_per_chunk) for one prefill step.

    No row scores beyond cdiv(max_seq_len, compress_ratio) columns; the row stride is a
    multiple of 64 so every chunk's logits specialize the same way in top-k."""
    width = cdiv(max(max_seq_len, 1), compress_ratio)
    width = min(
        max(_LOGITS_ROW_ALIGN, cdiv(width, _LOGITS_ROW_ALIGN) * _LOGITS_ROW_ALIGN), num_columns
    )
    row_stride = cdiv(width, _LOGITS_ROW_ALIGN) * _LOGITS_ROW_ALIGN
    rows_per_chunk = max(1, int(max_logits_mb * 1024 * 1024) // (row_stride * 4))
    return width, row_stride, rows_per_chunk


@triton.jit(
    do_not_specialize=[
        "stride_table_row",
        "stride_logits_row",
        "num_rows",
        "row_offset",
        "page_table_width",
        "logits_width",
    ],
    do_not_specialize_on_alignment=["page_table_ptr", "query_start_loc_ptr", "visible_blocks_ptr"],
)
def _prefill_scores_kernel(
    q_ptr,
    k_cache_ptr,
    page_table_ptr,
    query_start_loc_ptr,
    visible_blocks_ptr,
    logits_ptr,
    stride_table_row,
    stride_logits_row,
    num_rows,
    row_offset,
    page_table_width,
    logits_width,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    TILE_R: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    K_TILES: tl.constexpr,
    DOT_FP32: tl.constexpr,
    IMPRECISE_ACC: tl.constexpr,
):
    BLOCK_D: tl.constexpr = max(16, triton.next_power_of_2(HEAD_DIM))
    request = tl.program_id(0)
    base = tl.load(query_start_loc_ptr)
    request_start = tl.maximum(tl.load(query_start_loc_ptr + request) - base, row_offset)
    request_end = tl.minimum(
        tl.load(query_start_loc_ptr + request + 1) - base, row_offset + num_rows
    )
    first_row = request_start + tl.program_id(1) * TILE_R
    if first_row >= request_end:
        return
    rows = first_row + tl.arange(0, TILE_R)
    valid_rows = rows < request_end
    visible = tl.load(visible_blocks_ptr + rows, mask=valid_rows, other=0)
    visible = tl.minimum(visible, logits_width)
    max_visible = tl.max(visible, axis=0)
    tile_start = tl.program_id(2) * K_TILES
    if tile_start * BLOCK_N >= max_visible:
        return
    tile_end = tl.minimum(tile_start + K_TILES, tl.cdiv(max_visible, BLOCK_N))
    query = load_query_tile(
        q_ptr,
        first_row,
        request_end - first_row,
        NUM_HEADS,
        HEAD_DIM,
        BLOCK_D,
        TILE_R,
        HEADS_PAD,
        DOT_FP32,
    )
    table_row_ptr = page_table_ptr + request.to(tl.int64) * stride_table_row
    out_rows = (rows - row_offset).to(tl.int64) * stride_logits_row
    column_offsets = tl.arange(0, BLOCK_N)
    for tile in tl.range(tile_start, tile_end):
        columns = tile * BLOCK_N + column_offsets
        score = score_columns(
            query,
            k_cache_ptr,
            table_row_ptr,
            columns,
            columns < max_visible,
            page_table_width,
            PAGE_SIZE,
            HEAD_DIM,
            BLOCK_D,
            BLOCK_N,
            TILE_R,
            HEADS_PAD,
            DOT_FP32,
            IMPRECISE_ACC,
        )
        tl.store(
            logits_ptr + out_rows[None, :] + columns[:, None],
            score,
            mask=valid_rows[None, :] & (columns[:, None] < visible[None, :]),
        )


def _check_prefill(
    q, k_cache, page_table, query_start_loc, visible_blocks, max_query_len, max_seq_len
):
    num_heads, head_dim, page_size = check_scoring_inputs(q, k_cache)
    check_tensor("page_table", page_table, ndim=2, dtypes=(torch.int32,))
    if page_table.shape[1] < 1 or page_table.stride(1) != 1:
        raise ValueError(
            "page_table must have at least one column and be contiguous in its last dimension"
        )
    check_tensor("query_start_loc", query_start_loc, ndim=1, dtypes=(torch.int32,))
    check_shape("query_start_loc", query_start_loc, (page_table.shape[0] + 1,))
    check_tensor("visible_blocks", visible_blocks, ndim=1, dtypes=(torch.int32,))
    check_shape("visible_blocks", visible_blocks, (q.shape[0],))
    for name, t in (("query_start_loc", query_start_loc), ("visible_blocks", visible_blocks)):
        if t.shape[0] > 1 and t.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous; call .contiguous()")
    check_int("max_query_len", max_query_len, minimum=0)
    check_int("max_seq_len", max_seq_len, minimum=0)
    check_same_device(
        q=q,
        k_cache=k_cache,
        page_table=page_table,
        query_start_loc=query_start_loc,
        visible_blocks=visible_blocks,
    )
    return num_heads, head_dim, page_size


def prefill_scores_launch(
    q,
    k_cache,
    page_table,
    query_start_loc,
    visible_blocks,
    logits,
    max_query_len,
    row_offset,
    num_rows,
    logits_width,
    config: PrefillConfig | None = None,
    arch: int | None = None,
) -> KernelLaunch:
    """The launch that scores rows ``[row_offset, row_offset + num_rows)`` into ``logits``
    ([num_rows, logits_width] with any row stride). ``config`` overrides the dispatch;
    ``arch`` names the target (default: the GPU holding ``q``)."""
    num_heads, head_dim, page_size = _check_prefill(
        q, k_cache, page_table, query_start_loc, visible_blocks, max_query_len, 0
    )
    if not 0 <= row_offset <= row_offset + num_rows <= q.shape[0]:
        raise ValueError(
            f"rows [{row_offset}, {row_offset + num_rows}) are outside q's {q.shape[0]} rows"
        )
    check_tensor("logits", logits, ndim=2, dtypes=(torch.float32,))
    check_shape("logits", logits, (num_rows, logits_width))
    arch = device_arch(q) if arch is None else arch
    cfg = config or prefill_launch_config(q.dtype, num_heads, head_dim, arch)
    grid = (
        page_table.shape[0],
        cdiv(min(num_rows, max_query_len), cfg.tile_r),
        cdiv(logits_width, cfg.block_n * cfg.k_tiles),
    )
    return KernelLaunch(
        _prefill_scores_kernel,
        grid,
        (
            q,
            k_cache,
            page_table,
            query_start_loc,
            visible_blocks,
            logits,
            page_table.stride(0),
            logits.stride(0),
            num_rows,
            row_offset,
            page_table.shape[1],
            logits_width,
        ),
        dict(
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            PAGE_SIZE=page_size,
            TILE_R=cfg.tile_r,
            HEADS_PAD=cfg.heads_pad,
            BLOCK_N=cfg.block_n,
            K_TILES=cfg.k_tiles,
            DOT_FP32=cfg.dot_fp32,
            IMPRECISE_ACC=cfg.imprecise_acc,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        ),
    )


def qsa_select_paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    page_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    visible_blocks: torch.Tensor,
    token_topk: int,
    compress_ratio: int,
    max_query_len: int,
    block_indices: torch.Tensor,
    max_seq_len: int,
    *,
    max_logits_mb: float = DEFAULT_MAX_LOGITS_MB,
) -> None:
    """Score and select compressed prefill blocks in bounded row chunks.

    q [tokens, heads, head_dim] packed (cache dtype, contiguous); query_start_loc [reqs + 1]
    int32 offsets (may share the base of a larger tensor: offsets are taken relative to
    element 0); visible_blocks [tokens] int32; block_indices [tokens, token_topk //
    compress_ratio] int32. ``max_seq_len`` bounds the scored width; ``max_logits_mb`` bounds
    the temporary logits (a chunk holds at least one row).
    """
    block_topk = check_topk_geometry(token_topk, compress_ratio)
    _check_prefill(
        q, k_cache, page_table, query_start_loc, visible_blocks, max_query_len, max_seq_len
    )
    if (
        isinstance(max_logits_mb, bool)
        or not isinstance(max_logits_mb, (int, float))
        or not max_logits_mb > 0
    ):
        raise ValueError(f"max_logits_mb must be a positive number of MiB, got {max_logits_mb!r}")
    check_block_indices(block_indices, q, block_topk)
    rows = q.shape[0]
    if rows == 0:
        return
    num_columns = page_table.shape[1] * k_cache.shape[1]
    width, row_stride, rows_per_chunk = prefill_logits_layout(
        max_seq_len, compress_ratio, num_columns, max_logits_mb
    )
    chunk_rows = min(rows_per_chunk, rows)
    workspace = torch.empty((chunk_rows, row_stride), dtype=torch.float32, device=q.device)
    for start in range(0, rows, chunk_rows):
        count = min(chunk_rows, rows - start)
        logits = workspace[:count, :width]
        prefill_scores_launch(
            q,
            k_cache,
            page_table,
            query_start_loc,
            visible_blocks,
            logits,
            max_query_len,
            start,
            count,
            width,
        ).run()
        # every argument of the top-k is checked above (the logits are ours)
        for launch in checked_topk_launches(
            logits,
            visible_blocks[start : start + count],
            block_topk,
            block_indices[start : start + count],
        ):
            launch.run()
