"""Prototype (not in kernels/): the prefill scoring kernel also writes, per row, the maximum
order key of every group of G consecutive columns (a group fully visible), and the split
top-k's bound launch reads those maxima (CHUNK // G a chunk) instead of the chunk's logits.
Why: at 4096 x 32K the bound launch reads the chunk's 512 MB of logits (~230 us on an H100,
DRAM-bound) only to take group maxima of 8 keys; the scoring kernel has each score tile in
registers already."""
import triton
import triton.language as tl

from kernels._scoring import load_query_tile, score_columns
from kernels.topk import _order_keys, _keys_per_full_chunk, _lower_bound_of, _load_keys, _BOUND_STEPS, _GROUPS_PER_KEY


@triton.jit(
    do_not_specialize=["stride_table_row", "stride_logits_row", "num_rows", "row_offset",
                       "page_table_width", "logits_width", "stride_maxima_row"],
    do_not_specialize_on_alignment=["page_table_ptr", "query_start_loc_ptr", "visible_blocks_ptr"],
)
def scores_maxima_kernel(
    q_ptr, k_cache_ptr, page_table_ptr, query_start_loc_ptr, visible_blocks_ptr, logits_ptr,
    maxima_ptr, stride_table_row, stride_logits_row, num_rows, row_offset, page_table_width,
    logits_width, stride_maxima_row,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, TILE_R: tl.constexpr,
    HEADS_PAD: tl.constexpr, BLOCK_N: tl.constexpr, K_TILES: tl.constexpr, DOT_FP32: tl.constexpr,
    IMPRECISE_ACC: tl.constexpr, GROUP: tl.constexpr,
):
    BLOCK_D: tl.constexpr = max(16, triton.next_power_of_2(HEAD_DIM))
    request = tl.program_id(0)
    base = tl.load(query_start_loc_ptr)
    request_start = tl.maximum(tl.load(query_start_loc_ptr + request) - base, row_offset)
    request_end = tl.minimum(tl.load(query_start_loc_ptr + request + 1) - base, row_offset + num_rows)
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
    query = load_query_tile(q_ptr, first_row, request_end - first_row, NUM_HEADS, HEAD_DIM, BLOCK_D,
                            TILE_R, HEADS_PAD, DOT_FP32)
    table_row_ptr = page_table_ptr + request.to(tl.int64) * stride_table_row
    out_rows = (rows - row_offset).to(tl.int64) * stride_logits_row
    max_rows = (rows - row_offset).to(tl.int64) * stride_maxima_row
    column_offsets = tl.arange(0, BLOCK_N)
    group_offsets = tl.arange(0, BLOCK_N // GROUP)
    for tile in tl.range(tile_start, tile_end):
        columns = tile * BLOCK_N + column_offsets
        score = score_columns(query, k_cache_ptr, table_row_ptr, columns, columns < max_visible,
                              page_table_width, PAGE_SIZE, HEAD_DIM, BLOCK_D, BLOCK_N, TILE_R,
                              HEADS_PAD, DOT_FP32, IMPRECISE_ACC)
        tl.store(logits_ptr + out_rows[None, :] + columns[:, None], score,
                 mask=valid_rows[None, :] & (columns[:, None] < visible[None, :]))
        keys = tl.reshape(_order_keys(score), (BLOCK_N // GROUP, GROUP, TILE_R))
        maxima = tl.max(keys, axis=1)
        groups = tile * (BLOCK_N // GROUP) + group_offsets
        tl.store(maxima_ptr + max_rows[None, :] + groups[:, None], maxima,
                 mask=valid_rows[None, :] & ((groups[:, None] + 1) * GROUP <= visible[None, :]))


@triton.jit(do_not_specialize=["num_cols", "k", "stride_maxima_row"],
            do_not_specialize_on_alignment=["lengths_ptr"])
def bound_from_maxima_kernel(
    logits_ptr, maxima_ptr, lengths_ptr, counts_ptr, bounds_ptr, stride_logits_row,
    stride_maxima_row, num_cols, k, CHUNK: tl.constexpr, GROUP: tl.constexpr,
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    if n > k:
        if chunk == 0:
            tl.store(counts_ptr + row, 0)
            tl.store(counts_ptr + tl.num_programs(0) + row, 0)
        full, share = _keys_per_full_chunk(n, k, CHUNK)
        if chunk < full:
            if share * _GROUPS_PER_KEY <= CHUNK // GROUP:
                g = chunk * (CHUNK // GROUP) + tl.arange(0, CHUNK // GROUP)
                maxima = tl.load(maxima_ptr + row.to(tl.int64) * stride_maxima_row + g)
                bound = _lower_bound_of(maxima, share, _BOUND_STEPS)
            else:
                cols = chunk * CHUNK + tl.arange(0, CHUNK)
                keys = _load_keys(logits_ptr + row.to(tl.int64) * stride_logits_row, cols, n)
                bound = _lower_bound_of(keys, share, _BOUND_STEPS)
            tl.store(bounds_ptr + row.to(tl.int64) * tl.num_programs(1) + chunk, bound)
