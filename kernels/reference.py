"""Plain PyTorch versions of every op, the ground truth for the tests (float64 scoring)."""

from __future__ import annotations

import torch

__all__ = [
    "decode_scores",
    "prefill_scores",
    "ragged_topk",
    "expand_block_indices",
    "select_blocks",
]


def _keys(k_cache, page_table_row, num_columns):
    page_size = k_cache.shape[1]
    cols = torch.arange(num_columns, device=k_cache.device)
    pages = page_table_row.long()[cols // page_size]
    return k_cache[pages, cols % page_size, 0, :].double()  # [num_columns, head_dim]


def _row_scores(q_row, keys):
    # q_row [heads, head_dim]; sum over heads of relu(q . k)
    return torch.relu(keys @ q_row.double().T).sum(dim=1)


def decode_scores(q, k_cache, page_table, visible_blocks, decode_query_len):
    """float64 logits [rows, columns]; NaN where a column is not visible to the row."""
    columns = page_table.shape[1] * k_cache.shape[1]
    out = torch.full((q.shape[0], columns), float("nan"), dtype=torch.float64, device=q.device)
    for row in range(q.shape[0]):
        n = min(int(visible_blocks[row]), columns)
        if n > 0:
            keys = _keys(k_cache, page_table[row // decode_query_len], n)
            out[row, :n] = _row_scores(q[row], keys)
    return out


def prefill_scores(q, k_cache, page_table, query_start_loc, visible_blocks, logits_width):
    """float64 logits [rows, logits_width]; NaN where a column is not visible to the row."""
    out = torch.full((q.shape[0], logits_width), float("nan"), dtype=torch.float64, device=q.device)
    base = int(query_start_loc[0])
    for request in range(page_table.shape[0]):
        start, end = int(query_start_loc[request]) - base, int(query_start_loc[request + 1]) - base
        for row in range(start, end):
            n = min(int(visible_blocks[row]), logits_width)
            if n > 0:
                out[row, :n] = _row_scores(q[row], _keys(k_cache, page_table[request], n))
    return out


def ragged_topk(logits, lengths, k):
    """int64 [rows, k]: indices of the k largest of logits[r, :lengths[r]] (descending), or
    0..lengths[r]-1 then -1 when lengths[r] <= k."""
    rows, width = logits.shape
    out = torch.full((rows, k), -1, dtype=torch.int64)
    for row in range(rows):
        n = max(0, min(int(lengths[row]), width))
        if n <= k:
            out[row, :n] = torch.arange(n)
        else:
            out[row] = torch.topk(logits[row, :n].double().cpu(), k).indices
    return out


def select_blocks(scores, visible_blocks, k):
    """Reference select: top-k over the float64 scores."""
    return ragged_topk(torch.nan_to_num(scores, nan=float("-inf")), visible_blocks, k)


def expand_block_indices(
    block_indices, query_positions, visible_blocks, compress_ratio, token_topk
):
    """int64 [rows, token_topk + compress_ratio]: expanded tokens, the open group's tail, -1,
    and the trailing valid-entry count."""
    block_topk = token_topk // compress_ratio
    width = token_topk + compress_ratio - 1
    rows = block_indices.shape[0]
    out = torch.full((rows, width + 1), -1, dtype=torch.int64)
    for row in range(rows):
        position = int(query_positions[row])
        complete = max(0, min(int(visible_blocks[row]), block_topk))
        tokens = []
        for rank in range(complete):
            block = int(block_indices[row, rank])
            tokens += [
                block * compress_ratio + o if block >= 0 else -1 for o in range(compress_ratio)
            ]
        tail_start = (position + 1) // compress_ratio * compress_ratio
        tail = list(range(tail_start, position + 1))
        tokens += tail
        out[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
        out[row, width] = complete * compress_ratio + len(tail)
    return out
