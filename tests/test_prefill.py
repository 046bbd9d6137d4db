import dataclasses

import pytest
import torch

from kernels import (
    SHARED_MEMORY_BUDGET,
    prefill_launch_config,
    prefill_logits_layout,
    prefill_scores_launch,
    qsa_select_paged_prefill,
)
from kernels import reference as ref
from kernels.prefill import _planned_shared_bytes

from _helpers import (
    INT_POISON,
    assert_scores_match,
    assert_topk_matches,
    make_cache,
    make_page_table,
    make_q,
    score_rtol,
)

DTYPES = [torch.bfloat16, torch.float8_e4m3fn]


def _prefill_inputs(
    device, seed, *, dtype, heads, head_dim, lens, base=5, page_size=16, width=6, num_blocks=14
):
    gen = torch.Generator().manual_seed(seed)
    rows = sum(lens)
    k_cache = make_cache(num_blocks, page_size, head_dim, dtype, device, gen)
    q = make_q(rows, heads, head_dim, dtype, device, gen)
    page_table = make_page_table(len(lens), width, num_blocks, device, gen)
    # offsets with a non-zero base, as a view of a larger tensor
    offsets = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32) + base
    qsl = torch.cat([torch.tensor([99], dtype=torch.int32), offsets])[1:]
    visible = torch.randint(0, width * page_size + 1, (rows,), generator=gen, dtype=torch.int32)
    return q, k_cache, page_table, qsl.to(device), visible.to(device)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,head_dim", [(1, 64), (6, 80), (32, 128), (64, 256)])
def test_prefill_scores_with_chunk_boundaries(device, dtype, heads, head_dim):
    lens = [7, 1, 19]
    q, k_cache, page_table, qsl, visible = _prefill_inputs(
        device, heads * 7, dtype=dtype, heads=heads, head_dim=head_dim, lens=lens
    )
    width = 80  # logits width narrower than the table's 96 columns: wider visibility is clipped
    want = ref.prefill_scores(
        q.cpu(), k_cache.cpu(), page_table.cpu(), qsl.cpu(), visible.cpu(), width
    )
    rows = q.shape[0]
    # chunks that start and end inside requests
    for start, count in [(0, rows), (0, 5), (5, 8), (13, 14)]:
        logits = torch.full((count, width), float("nan"), device=device)
        prefill_scores_launch(
            q, k_cache, page_table, qsl, visible, logits, max(lens), start, count, width
        ).run()
        assert_scores_match(
            logits, want[start : start + count], rtol=score_rtol(dtype, prefill=True)
        )


@pytest.mark.parametrize("tile_r", [1, 4, 16])
def test_prefill_tile_constants(device, tile_r):
    q, k_cache, page_table, qsl, visible = _prefill_inputs(
        device, tile_r, dtype=torch.bfloat16, heads=4, head_dim=64, lens=[9, 20]
    )
    base = prefill_launch_config(torch.bfloat16, 4, 64)
    cfg = dataclasses.replace(base, tile_r=tile_r, heads_pad=max(4, 16 // tile_r), k_tiles=2)
    width = 96
    logits = torch.full((29, width), float("nan"), device=device)
    prefill_scores_launch(
        q, k_cache, page_table, qsl, visible, logits, 20, 0, 29, width, config=cfg
    ).run()
    want = ref.prefill_scores(
        q.cpu(), k_cache.cpu(), page_table.cpu(), qsl.cpu(), visible.cpu(), width
    )
    assert_scores_match(logits, want, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_logits_mb", [512, 0.002])  # one chunk; chunks of 8 rows
def test_select_paged_prefill(device, dtype, max_logits_mb):
    token_topk, ratio = 64, 4
    k = token_topk // ratio
    lens = [11, 3, 17]
    q, k_cache, page_table, qsl, visible = _prefill_inputs(
        device, 77, dtype=dtype, heads=8, head_dim=64, lens=lens
    )
    max_seq_len = 300  # -> 75 compressed columns -> logits width 64..96 clipped to the table
    width, _, rows_per_chunk = prefill_logits_layout(max_seq_len, ratio, 96, max_logits_mb)
    assert (rows_per_chunk < q.shape[0]) == (max_logits_mb < 1)
    out = torch.full((q.shape[0], k), INT_POISON, dtype=torch.int32, device=device)
    qsa_select_paged_prefill(
        q,
        k_cache,
        page_table,
        qsl,
        visible,
        token_topk,
        ratio,
        max(lens),
        out,
        max_seq_len,
        max_logits_mb=max_logits_mb,
    )
    scores = ref.prefill_scores(
        q.cpu(), k_cache.cpu(), page_table.cpu(), qsl.cpu(), visible.cpu(), width
    )
    lengths = visible.cpu().clamp(max=width)
    assert_topk_matches(
        out,
        torch.nan_to_num(scores, nan=float("-inf")),
        lengths,
        k,
        rtol=score_rtol(dtype, prefill=True),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads", [1, 2, 8, 16, 32, 64])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
def test_prefill_tiles_fit_shared_memory(dtype, heads, head_dim):
    cfg = prefill_launch_config(dtype, heads, head_dim)
    itemsize = 1 if dtype == torch.float8_e4m3fn else 2
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    assert cfg.tile_r * cfg.heads_pad >= 16
    assert (
        _planned_shared_bytes(
            cfg.tile_r * cfg.heads_pad, block_d, cfg.block_n, cfg.num_stages, itemsize
        )
        <= SHARED_MEMORY_BUDGET
    )


def test_logits_layout():
    assert prefill_logits_layout(1, 4, 32768, 512)[:2] == (64, 64)
    assert prefill_logits_layout(4 * 1000, 4, 32768, 512)[:2] == (1024, 1024)
    assert prefill_logits_layout(10**7, 4, 32768, 512)[:2] == (32768, 32768)
    assert prefill_logits_layout(10**7, 4, 100, 512)[:2] == (100, 128)
    assert prefill_logits_layout(10**7, 4, 32768, 1)[2] == 8


def test_prefill_bad_input(device):
    q, k_cache, page_table, qsl, visible = _prefill_inputs(
        device, 1, dtype=torch.bfloat16, heads=2, head_dim=64, lens=[3]
    )
    out = torch.zeros(3, 4, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="query_start_loc"):
        qsa_select_paged_prefill(q, k_cache, page_table, qsl[:1], visible, 16, 4, 3, out, 64)
    with pytest.raises(ValueError, match="compress_ratio"):
        qsa_select_paged_prefill(q, k_cache, page_table, qsl, visible, 15, 4, 3, out, 64)
    with pytest.raises(ValueError, match="max_logits_mb"):
        qsa_select_paged_prefill(
            q, k_cache, page_table, qsl, visible, 16, 4, 3, out, 64, max_logits_mb=0
        )
    with pytest.raises(TypeError, match="query_start_loc"):
        qsa_select_paged_prefill(q, k_cache, page_table, qsl.long(), visible, 16, 4, 3, out, 64)
