"""Decode scoring: paged multi-head ReLU scores of a uniform decode batch, and the decode select.

Every request has ``decode_query_len`` query rows. A program scores a group of query rows of
one request against ``TILES_PER_PROG`` tiles of ``BLOCK_N`` compressed columns.

Specialization contract (what the warmup planner relies on):
- constexprs come from the deployment geometry and :func:`decode_launch_config`;
- ``q``/``k_cache``/``logits`` are contiguous and 16-byte aligned (checked), so their
  pointers always specialize the same way; ``page_table`` and ``visible_blocks`` may be views
  of larger buffers and are excluded from alignment specialization
  (``do_not_specialize_on_alignment``); the page-table row stride is excluded from integer
  specialization (``do_not_specialize``).
- The launch makes no host-device synchronization: it can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from ._checks import (
    check_block_indices,
    check_int,
    check_same_device,
    check_scoring_inputs,
    check_shape,
    check_tensor,
    check_topk_geometry,
)
from ._fast_launch import remember_prepared
from ._launch import KernelLaunch, call_key, cdiv, interpreting, next_power_of_2
from ._scoring import load_query_tile, score_columns
from .topk import allocate_workspace, checked_topk_call

__all__ = [
    "DecodeConfig",
    "decode_launch_config",
    "decode_tuning_configs",
    "decode_tiles_per_program",
    "decode_tile_shape",
    "decode_scores_launch",
    "qsa_paged_decode_scores",
    "qsa_select_paged_decode",
]

# Two tile shapes (tools/bench_kernels.py --sweep):
# - 64 columns, 2 stages: Triton pipelines the key gather through cp.async, which wins for bf16
#   on grids that fill the GPU many times over;
# - 128 columns, 1 stage: plain loads, which keep the L2 evict-first hint (cp.async drops it), so
#   the streamed keys do not push other lines (the logits the top-k reads next, a caller's dirty
#   lines) out of L2. Faster for fp8 at every size measured and for bf16 on small grids.
DECODE_BLOCK_N = 64
DECODE_WIDE_BLOCK_N = 128
# Grids below this many 64-column programs are small (e.g. 8 requests x 32K columns).
DECODE_SMALL_GRID = 16384
# Largest query tile (rows x padded heads) one program keeps as the dot operand.
_MAX_QUERY_TILE = 256
# Decode is memory-bound: promote fp8 products to fp32 after every wgmma (k=32), for free.
FP8_PRECISE_ACC = 32


@dataclass(frozen=True)
class DecodeConfig:
    block_n: int
    tiles_per_program: int
    query_group: int  # query rows per program (power of two)
    heads_pad: int
    num_warps: int
    num_stages: int
    dot_fp32: bool
    imprecise_acc: int  # fp8 only: products accumulated before promotion to fp32


def decode_tiles_per_program(num_programs_at_one_tile: int) -> int:
    """Column tiles per program: group tiles once the grid is large enough to fill the GPU."""
    if num_programs_at_one_tile < 16384:
        return 1
    if num_programs_at_one_tile < 32768:
        return 2
    if num_programs_at_one_tile < 131072:
        return 4
    return 8


def decode_tile_shape(
    cache_dtype: torch.dtype, num_programs_at_one_tile: int
) -> tuple[int, int, int]:
    """(block_n, num_stages, tiles_per_program) from the number of 64-column programs."""
    if cache_dtype == torch.float8_e4m3fn:
        # 128-column tiles: the 64-column grouping, one program per 4 of its tiles
        return (
            DECODE_WIDE_BLOCK_N,
            1,
            max(1, decode_tiles_per_program(num_programs_at_one_tile) // 4),
        )
    if num_programs_at_one_tile < DECODE_SMALL_GRID:
        return DECODE_WIDE_BLOCK_N, 1, 2
    return DECODE_BLOCK_N, 2, decode_tiles_per_program(num_programs_at_one_tile)


def decode_launch_config(
    cache_dtype: torch.dtype,
    num_heads: int,
    head_dim: int,
    decode_query_len: int,
    num_requests: int,
    num_columns: int,
) -> DecodeConfig:
    """Every launch decision of the decode scoring kernel (called by the launcher and the
    planner)."""
    return _decode_launch_config(
        cache_dtype,
        num_heads,
        head_dim,
        decode_query_len,
        num_requests,
        num_columns,
        interpreting(),
    )


def decode_tuning_configs(base: DecodeConfig) -> dict[str, DecodeConfig]:
    """Every decode scoring design the benchmarks time beside a dispatched config ``base``, by
    name, ``base`` first as "dispatched": its tile width, warps, pipeline depth and tiles per
    program varied over the ranges a tuning run weighs (a config that does not fit the
    target's shared memory or registers fails to compile and is reported, not timed)."""
    configs = {"dispatched": base}
    for block_n in (32, 64, 128):
        for warps in (1, 2, 4, 8):
            for stages in (1, 2, 3):
                for tpp in (1, 2, 4, 8):
                    cfg = replace(
                        base,
                        block_n=block_n,
                        num_warps=warps,
                        num_stages=stages,
                        tiles_per_program=tpp,
                    )
                    if cfg != base:
                        configs[f"n{block_n}.w{warps}.s{stages}.tpp{tpp}"] = cfg
    return configs


@functools.lru_cache(
    maxsize=4096
)  # pure and called on every decode step: keep it off the host path
def _decode_launch_config(
    cache_dtype, num_heads, head_dim, decode_query_len, num_requests, num_columns, interpret
) -> DecodeConfig:
    heads_pad = next_power_of_2(num_heads)
    query_group = min(next_power_of_2(decode_query_len), max(1, _MAX_QUERY_TILE // heads_pad))
    heads_pad = max(heads_pad, 16 // query_group)  # tl.dot needs an operand width of at least 16
    query_groups = cdiv(decode_query_len, query_group)
    programs = num_requests * query_groups * cdiv(num_columns, DECODE_BLOCK_N)
    block_n, num_stages, tiles_per_program = decode_tile_shape(cache_dtype, programs)
    tile_width = query_group * heads_pad
    # Keep the fp32 accumulator near 64 registers a thread.
    num_warps = max(1, min(8, block_n * tile_width // (32 * 64)))
    # Floors measured on the H200 (tools/bench_kernels.py --sweep): plain
    # loads keep enough bytes in flight with 4 warps, the cp.async pipeline with 2.
    num_warps = max(num_warps, 4 if num_stages == 1 else 2)
    return DecodeConfig(
        block_n=block_n,
        tiles_per_program=tiles_per_program,
        query_group=query_group,
        heads_pad=heads_pad,
        num_warps=num_warps,
        num_stages=num_stages,
        dot_fp32=interpret and cache_dtype == torch.bfloat16,
        imprecise_acc=FP8_PRECISE_ACC if cache_dtype == torch.float8_e4m3fn else 0,
    )


@triton.jit(
    do_not_specialize=["stride_table_row"],
    do_not_specialize_on_alignment=["page_table_ptr", "visible_blocks_ptr"],
)
def _decode_scores_kernel(
    q_ptr,
    k_cache_ptr,
    page_table_ptr,
    visible_blocks_ptr,
    logits_ptr,
    stride_table_row,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    PAGE_TABLE_WIDTH: tl.constexpr,
    DECODE_QUERY_LEN: tl.constexpr,
    QUERY_GROUP: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES_PER_PROG: tl.constexpr,
    DOT_FP32: tl.constexpr,
    IMPRECISE_ACC: tl.constexpr,
):
    NUM_COLUMNS: tl.constexpr = PAGE_TABLE_WIDTH * PAGE_SIZE
    BLOCK_D: tl.constexpr = max(16, triton.next_power_of_2(HEAD_DIM))
    request = tl.program_id(0)
    tile_start = tl.program_id(1) * TILES_PER_PROG
    first_query = tl.program_id(2) * QUERY_GROUP
    lanes = tl.arange(0, QUERY_GROUP)
    valid_rows = first_query + lanes < DECODE_QUERY_LEN
    rows = request * DECODE_QUERY_LEN + first_query + lanes
    visible = tl.load(visible_blocks_ptr + rows, mask=valid_rows, other=0)
    visible = tl.minimum(visible, NUM_COLUMNS)
    max_visible = tl.max(visible, axis=0)
    if tile_start * BLOCK_N >= max_visible:
        return
    tile_end = tl.minimum(tile_start + TILES_PER_PROG, tl.cdiv(max_visible, BLOCK_N))
    query = load_query_tile(
        q_ptr,
        request * DECODE_QUERY_LEN + first_query,
        DECODE_QUERY_LEN - first_query,
        NUM_HEADS,
        HEAD_DIM,
        BLOCK_D,
        QUERY_GROUP,
        HEADS_PAD,
        DOT_FP32,
    )
    table_row_ptr = page_table_ptr + request.to(tl.int64) * stride_table_row
    column_offsets = tl.arange(0, BLOCK_N)
    out_rows = rows.to(tl.int64) * NUM_COLUMNS
    for tile in tl.range(tile_start, tile_end):
        columns = tile * BLOCK_N + column_offsets
        score = score_columns(
            query,
            k_cache_ptr,
            table_row_ptr,
            columns,
            columns < max_visible,
            PAGE_TABLE_WIDTH,
            PAGE_SIZE,
            HEAD_DIM,
            BLOCK_D,
            BLOCK_N,
            QUERY_GROUP,
            HEADS_PAD,
            DOT_FP32,
            IMPRECISE_ACC,
        )
        tl.store(
            logits_ptr + out_rows[None, :] + columns[:, None],
            score,
            mask=valid_rows[None, :] & (columns[:, None] < visible[None, :]),
        )


def _check_decode(q, k_cache, page_table, visible_blocks, decode_query_len):
    num_heads, head_dim, page_size = check_scoring_inputs(q, k_cache)
    check_int("decode_query_len", decode_query_len, minimum=1)
    if q.shape[0] % decode_query_len:
        raise ValueError(
            f"q has {q.shape[0]} rows, not a multiple of decode_query_len ({decode_query_len})"
        )
    num_requests = q.shape[0] // decode_query_len
    check_tensor("page_table", page_table, ndim=2, dtypes=(torch.int32,))
    if page_table.shape[0] != num_requests:
        raise ValueError(
            f"page_table has {page_table.shape[0]} rows; expected one per request ({num_requests})"
        )
    if page_table.shape[1] < 1:
        raise ValueError("page_table must have at least one column")
    if page_table.stride(1) != 1:
        raise ValueError("page_table must be contiguous in its last dimension; call .contiguous()")
    check_tensor("visible_blocks", visible_blocks, ndim=1, dtypes=(torch.int32,))
    check_shape("visible_blocks", visible_blocks, (q.shape[0],))
    if visible_blocks.stride(0) != 1:
        raise ValueError("visible_blocks must be contiguous; call .contiguous()")
    check_same_device(q=q, k_cache=k_cache, page_table=page_table, visible_blocks=visible_blocks)
    return num_heads, head_dim, page_size, num_requests


def decode_scores_launch(
    q,
    k_cache,
    page_table,
    visible_blocks,
    logits,
    decode_query_len,
    config: DecodeConfig | None = None,
) -> KernelLaunch:
    """The launch that scores a decode batch into ``logits`` [rows, width*page_size] (float32).

    ``config`` overrides :func:`decode_launch_config` (tests use it to reach every branch)."""
    geometry = _check_decode(q, k_cache, page_table, visible_blocks, decode_query_len)
    check_tensor("logits", logits, ndim=2, dtypes=(torch.float32,))
    check_shape("logits", logits, (q.shape[0], page_table.shape[1] * geometry[2]))
    if not logits.is_contiguous():
        raise ValueError("logits must be contiguous")
    return _scores_launch(
        q, k_cache, page_table, visible_blocks, logits, decode_query_len, geometry, config
    )


def _scores_launch(
    q, k_cache, page_table, visible_blocks, logits, decode_query_len, geometry, config
) -> KernelLaunch:
    # arguments checked by the caller; geometry is what _check_decode returned
    num_heads, head_dim, page_size, num_requests = geometry
    num_columns = page_table.shape[1] * page_size
    cfg = config or decode_launch_config(
        q.dtype, num_heads, head_dim, decode_query_len, num_requests, num_columns
    )
    grid = (
        num_requests,
        cdiv(cdiv(num_columns, cfg.block_n), cfg.tiles_per_program),
        cdiv(decode_query_len, cfg.query_group),
    )
    return KernelLaunch(
        _decode_scores_kernel,
        grid,
        (q, k_cache, page_table, visible_blocks, logits, page_table.stride(0)),
        dict(
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            PAGE_SIZE=page_size,
            PAGE_TABLE_WIDTH=page_table.shape[1],
            DECODE_QUERY_LEN=decode_query_len,
            QUERY_GROUP=cfg.query_group,
            HEADS_PAD=cfg.heads_pad,
            BLOCK_N=cfg.block_n,
            TILES_PER_PROG=cfg.tiles_per_program,
            DOT_FP32=cfg.dot_fp32,
            IMPRECISE_ACC=cfg.imprecise_acc,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        ),
    )


def qsa_paged_decode_scores(q, k_cache, page_table, visible_blocks, decode_query_len, logits=None):
    """Decode logits [rows, columns]: column c of row r holds sum_h relu(q[r,h] . key(c)) for
    c < visible_blocks[r]; other columns are left untouched (uninitialized when allocated here)."""
    if logits is None:
        check_tensor("page_table", page_table, ndim=2)
        check_tensor("k_cache", k_cache, ndim=4)
        logits = torch.empty(
            (q.shape[0], page_table.shape[1] * k_cache.shape[1]),
            dtype=torch.float32,
            device=q.device,
        )
    decode_scores_launch(q, k_cache, page_table, visible_blocks, logits, decode_query_len).run()
    return logits


# checked calls by call_key, replayed without their checks and launch choices
_prepared_selects: dict = {}


def qsa_select_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    page_table: torch.Tensor,
    visible_blocks: torch.Tensor,
    token_topk: int,
    compress_ratio: int,
    decode_query_len: int,
    block_indices: torch.Tensor,
) -> None:
    """Score and select compressed blocks for a request-major decode batch.

    q [num_requests * decode_query_len, heads, head_dim] (cache dtype, contiguous);
    k_cache [blocks, page_size, 1, head_dim]; page_table [num_requests, max_pages] int32;
    visible_blocks [rows] int32; block_indices [rows, token_topk // compress_ratio] int32 receives,
    per row, the indices of the top-scoring visible blocks (any order), -1 padded when fewer
    blocks are visible. No host-device synchronization: safe to capture in a CUDA graph.
    """
    tensors = (q, k_cache, page_table, visible_blocks, block_indices)
    key = call_key(tensors, (token_topk, compress_ratio, decode_query_len))
    call, (logits_shape, sizes) = _prepared_selects.get(key, (None, (None, ())))
    if call is not None and call.ready():
        logits = torch.empty(logits_shape, dtype=torch.float32, device=q.device)
        if call.launch((*tensors, logits, *allocate_workspace(logits, sizes))):
            return
    block_topk = check_topk_geometry(token_topk, compress_ratio)
    geometry = _check_decode(q, k_cache, page_table, visible_blocks, decode_query_len)
    check_block_indices(block_indices, q, block_topk)
    logits_shape = (q.shape[0], page_table.shape[1] * geometry[2])
    logits = torch.empty(logits_shape, dtype=torch.float32, device=q.device)
    # every argument of the top-k is checked above (the logits are ours)
    topk, sizes, workspace = checked_topk_call(logits, visible_blocks, block_topk, block_indices)
    launches = [
        _scores_launch(
            q, k_cache, page_table, visible_blocks, logits, decode_query_len, geometry, None
        ),
        *topk,
    ]
    for launch in launches:
        launch.run()
    remember_prepared(
        _prepared_selects,
        key,
        launches,
        (*tensors, logits, *workspace),
        fresh=1 + len(workspace),
        extra=(logits_shape, sizes),
    )
