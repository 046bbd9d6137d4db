"""The column-scoring step shared by the decode and prefill kernels.

For a tile of compressed-cache columns, gather the keys through the page table and compute
``sum_h relu(q_h . k)`` for every query row of the program's query tile.
"""

import triton
import triton.language as tl


@triton.jit
def score_columns(
    query,  # [BLOCK_D, ROWS_PAD * HEADS_PAD], zero where the row or head is padding
    k_cache_ptr,
    table_row_ptr,  # page-table row of the request
    columns,  # [BLOCK_N] logical column indices
    live,  # [BLOCK_N] columns worth loading
    page_table_width,
    PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    DOT_FP32: tl.constexpr,
    IMPRECISE_ACC: tl.constexpr,
):
    logical_page = tl.minimum(columns // PAGE_SIZE, page_table_width - 1)
    page_offset = columns % PAGE_SIZE
    physical_page = tl.load(table_row_ptr + logical_page, mask=live, other=0)
    dims = tl.arange(0, BLOCK_D)
    # k_cache is contiguous [blocks, PAGE_SIZE, 1, HEAD_DIM]: strides follow from constexprs,
    # so the compiler sees 16-element-aligned rows and vectorizes the loads.
    row_offsets = physical_page.to(tl.int64) * (PAGE_SIZE * HEAD_DIM) + page_offset * HEAD_DIM
    keys = tl.load(
        k_cache_ptr + row_offsets[:, None] + dims[None, :],
        mask=live[:, None] & (dims[None, :] < HEAD_DIM),
        other=0.0,
        eviction_policy="evict_first",
    )
    if DOT_FP32:
        keys = keys.to(tl.float32)
    # fp8 on sm_90: wgmma accumulates at reduced precision unless promoted to fp32 every
    # IMPRECISE_ACC products (Triton's default never promotes); ignored for bf16.
    scores = tl.dot(keys, query, out_dtype=tl.float32, max_num_imprecise_acc=IMPRECISE_ACC)
    scores = tl.reshape(tl.maximum(scores, 0.0), (BLOCK_N, ROWS_PAD, HEADS_PAD))
    return tl.sum(scores, axis=2)  # [BLOCK_N, ROWS_PAD]


@triton.jit
def load_query_tile(
    q_ptr,
    first_row,
    num_valid_rows,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ROWS_PAD: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    """Load rows ``first_row ..`` of contiguous q as the [BLOCK_D, ROWS_PAD*HEADS_PAD] dot
    operand."""
    n = tl.arange(0, ROWS_PAD * HEADS_PAD)
    row = n // HEADS_PAD
    head = n % HEADS_PAD
    dims = tl.arange(0, BLOCK_D)
    offsets = (first_row + row).to(tl.int64) * (NUM_HEADS * HEAD_DIM) + head * HEAD_DIM
    query = tl.load(
        q_ptr + offsets[None, :] + dims[:, None],
        mask=((row < num_valid_rows) & (head < NUM_HEADS))[None, :] & (dims[:, None] < HEAD_DIM),
        other=0.0,
    )
    if DOT_FP32:
        query = query.to(tl.float32)
    return query
