"""Prototype (not in kernels/, not dispatched): the decode select in ONE launch for decode
query length 1 and rows the one-program top-k takes whole (SINGLE): each scoring program
scores its column tiles, stores them, arrives on its request's counter (acq_rel after a CTA
barrier, as the coop path does); the last program of a request runs the one-row top-k over
the row's logits (read through L2) and restores the counter to 0. The counters are field 1 of
the coop row states (per device and stream, zero there and left so; field 0 untouched).

Why: the eager decode select 1 x 2K makes two C launches (3.6-4.3 us each on the H100 host's
fast state); on its slow state the call is 31-34 us against a 30 us target."""

import torch
import triton
import triton.language as tl

from kernels._launch import KernelLaunch, cdiv, next_power_of_2
from kernels._scoring import load_query_tile, score_columns
from kernels.decode import _check_decode, decode_launch_config
from kernels.topk import (
    _COOP_STATE_INTS,
    _kth_largest_bisect,
    _order_keys,
    _row_states,
    _write_selected,
    _write_short_row,
)

_STATE = tl.constexpr(_COOP_STATE_INTS)


@triton.jit(
    do_not_specialize=["stride_table_row", "stride_out_row", "k"],
    do_not_specialize_on_alignment=["page_table_ptr", "visible_blocks_ptr", "out_ptr"],
)
def _fused_select_kernel(
    q_ptr,
    k_cache_ptr,
    page_table_ptr,
    visible_blocks_ptr,
    logits_ptr,
    states_ptr,
    out_ptr,
    stride_table_row,
    stride_out_row,
    k,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    PAGE_TABLE_WIDTH: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES_PER_PROG: tl.constexpr,
    DOT_FP32: tl.constexpr,
    IMPRECISE_ACC: tl.constexpr,
    TOPK_BLOCK: tl.constexpr,
    OUT_BLOCK: tl.constexpr,
):
    NUM_COLUMNS: tl.constexpr = PAGE_TABLE_WIDTH * PAGE_SIZE
    BLOCK_D: tl.constexpr = max(16, triton.next_power_of_2(HEAD_DIM))
    request = tl.program_id(0)  # one query row per request
    tile_start = tl.program_id(1) * TILES_PER_PROG
    lanes = tl.arange(0, 1)
    visible = tl.minimum(tl.load(visible_blocks_ptr + request + lanes), NUM_COLUMNS)
    n_visible = tl.max(visible, axis=0)
    if tile_start * BLOCK_N < n_visible:
        tile_end = tl.minimum(tile_start + TILES_PER_PROG, tl.cdiv(n_visible, BLOCK_N))
        query = load_query_tile(
            q_ptr, request, 1, NUM_HEADS, HEAD_DIM, BLOCK_D, 1, HEADS_PAD, DOT_FP32
        )
        table_row_ptr = page_table_ptr + request.to(tl.int64) * stride_table_row
        column_offsets = tl.arange(0, BLOCK_N)
        out_row = request.to(tl.int64) * NUM_COLUMNS
        for tile in tl.range(tile_start, tile_end):
            columns = tile * BLOCK_N + column_offsets
            score = score_columns(
                query,
                k_cache_ptr,
                table_row_ptr,
                columns,
                columns < n_visible,
                PAGE_TABLE_WIDTH,
                PAGE_SIZE,
                HEAD_DIM,
                BLOCK_D,
                BLOCK_N,
                1,
                HEADS_PAD,
                DOT_FP32,
                IMPRECISE_ACC,
            )
            tl.store(
                logits_ptr + out_row + columns[:, None] + lanes[None, :],
                score,
                mask=columns[:, None] < visible[None, :],
            )
    # release this program's logits, arrive; the last of the request selects its row
    tl.debug_barrier()
    counter = states_ptr + request * _STATE + 1
    if tl.atomic_add(counter, 1, sem="acq_rel") == tl.num_programs(1) - 1:
        n = tl.maximum(n_visible, 0)
        row_ptr = logits_ptr + request.to(tl.int64) * NUM_COLUMNS
        out_row_ptr = out_ptr + request.to(tl.int64) * stride_out_row
        if n <= k:
            _write_short_row(out_row_ptr, n, k, OUT_BLOCK)
        else:
            offsets = tl.arange(0, TOPK_BLOCK)
            # written by other programs of this launch: read through L2
            values = tl.load(row_ptr + offsets, mask=offsets < n, other=0.0, cache_modifier=".cg")
            keys = _order_keys(values)
            threshold, ties = _kth_largest_bisect(row_ptr, keys, n, k, TOPK_BLOCK, True)
            _write_selected(row_ptr, out_row_ptr, keys, n, threshold, ties, TOPK_BLOCK, True)
        tl.store(counter, 0)


def fused_select_launch(q, k_cache, page_table, visible_blocks, token_topk, compress_ratio, out):
    """(launch, logits) of the fused decode select; None where it does not apply."""
    num_heads, head_dim, page_size, num_requests = _check_decode(
        q, k_cache, page_table, visible_blocks, 1
    )
    num_columns = page_table.shape[1] * page_size
    k = token_topk // compress_ratio
    # ptxas for sm_90a: 120 registers at 2048 columns (the scoring kernel alone: 120), 238 at
    # 8192 (the one-row top-k's keys in registers): wider rows would cost the scoring occupancy
    if num_columns > 2048 or num_requests > 128:
        return None
    cfg = decode_launch_config(q.dtype, num_heads, head_dim, 1, num_requests, num_columns)
    if cfg.query_group != 1:
        return None
    logits = torch.empty((num_requests, num_columns), dtype=torch.float32, device=q.device)
    states = _row_states(logits, num_requests)
    grid = (num_requests, cdiv(cdiv(num_columns, cfg.block_n), cfg.tiles_per_program), 1)
    launch = KernelLaunch(
        _fused_select_kernel,
        grid,
        (q, k_cache, page_table, visible_blocks, logits, states, out, page_table.stride(0),
         out.stride(0), k),
        dict(
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            PAGE_SIZE=page_size,
            PAGE_TABLE_WIDTH=page_table.shape[1],
            HEADS_PAD=cfg.heads_pad,
            BLOCK_N=cfg.block_n,
            TILES_PER_PROG=cfg.tiles_per_program,
            DOT_FP32=cfg.dot_fp32,
            IMPRECISE_ACC=cfg.imprecise_acc,
            TOPK_BLOCK=max(1024, next_power_of_2(num_columns)),
            OUT_BLOCK=1024,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        ),
    )
    return launch, logits, states
