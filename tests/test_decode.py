import dataclasses

import pytest
import torch

from kernels import (
    decode_launch_config,
    decode_scores_launch,
    decode_tile_shape,
    decode_tiles_per_program,
    qsa_select_paged_decode,
)
from kernels import reference as ref

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


def _decode_inputs(
    device, seed, *, dtype, heads, head_dim, dql, num_reqs, page_size=16, width=5, num_blocks=12
):
    gen = torch.Generator().manual_seed(seed)
    k_cache = make_cache(num_blocks, page_size, head_dim, dtype, device, gen)
    q = make_q(num_reqs * dql, heads, head_dim, dtype, device, gen)
    page_table = make_page_table(num_reqs, width, num_blocks, device, gen)
    columns = width * page_size
    visible = torch.randint(0, columns + 1, (num_reqs * dql,), generator=gen, dtype=torch.int32)
    visible[0] = columns  # at least one full row
    if len(visible) > 2:
        visible[1] = 0  # and an empty one
    return q, k_cache, page_table, visible.to(device)


def _scores(launch_inputs, dql, config=None):
    q, k_cache, page_table, visible = launch_inputs
    logits = torch.full(
        (q.shape[0], page_table.shape[1] * k_cache.shape[1]), float("nan"), device=q.device
    )
    decode_scores_launch(q, k_cache, page_table, visible, logits, dql, config=config).run()
    return logits


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dql", [1, 2, 3, 4])
@pytest.mark.parametrize("heads,head_dim", [(1, 64), (5, 96), (16, 128), (64, 256)])
def test_decode_scores_match_reference(device, dtype, dql, heads, head_dim):
    inputs = _decode_inputs(
        device,
        seed=dql * 100 + heads,
        dtype=dtype,
        heads=heads,
        head_dim=head_dim,
        dql=dql,
        num_reqs=3,
    )
    got = _scores(inputs, dql)
    assert_scores_match(
        got, ref.decode_scores(*[t.cpu() for t in inputs], dql), rtol=score_rtol(dtype)
    )


@pytest.mark.parametrize("tiles_per_program", [1, 2, 4, 8])
@pytest.mark.parametrize("block_n,num_stages", [(64, 2), (128, 1)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_every_tiles_per_program_group(
    device, tiles_per_program, block_n, num_stages, dtype
):
    # The groups are reached at thousands of requests; run the kernel with each group's constants
    # and each tile shape (a 128-column tile spans pages: the page size here is 16).
    inputs = _decode_inputs(
        device,
        seed=tiles_per_program,
        dtype=dtype,
        heads=4,
        head_dim=64,
        dql=2,
        num_reqs=2,
        width=12,
        page_size=16,
    )
    q, k_cache, page_table, _ = inputs
    base = decode_launch_config(dtype, 4, 64, 2, 2, 12 * 16)
    cfg = dataclasses.replace(
        base, tiles_per_program=tiles_per_program, block_n=block_n, num_stages=num_stages
    )
    got = _scores(inputs, 2, config=cfg)
    assert_scores_match(
        got, ref.decode_scores(*[t.cpu() for t in inputs], 2), rtol=score_rtol(dtype)
    )


def test_decode_query_groups_split_rows(device):
    # 64 heads x 8 query rows exceeds one program's query tile: rows are split across programs
    cfg = decode_launch_config(torch.bfloat16, 64, 64, 8, 2, 64)
    assert cfg.query_group < 8
    inputs = _decode_inputs(
        device,
        seed=5,
        dtype=torch.bfloat16,
        heads=64,
        head_dim=64,
        dql=8,
        num_reqs=2,
        width=4,
        page_size=16,
    )
    assert_scores_match(
        _scores(inputs, 8), ref.decode_scores(*[t.cpu() for t in inputs], 8), rtol=1e-5
    )


def test_tiles_per_program_thresholds():
    assert [
        decode_tiles_per_program(n) for n in (1, 16383, 16384, 32767, 32768, 131071, 131072)
    ] == [1, 1, 2, 2, 4, 4, 8]

    # the dispatch functions drive the config: 32K columns -> 512 64-column tiles a request
    def shapes(dtype, reqs):
        cfgs = [decode_launch_config(dtype, 32, 128, 1, n, 32768) for n in reqs]
        return {(c.block_n, c.num_stages, c.tiles_per_program) for c in cfgs}

    # bf16: wide single-stage tiles below 16384 programs (31 requests), then the pipelined groups
    assert shapes(torch.bfloat16, (1, 31)) == {(128, 1, 2)}
    assert shapes(torch.bfloat16, (32, 63, 64, 255, 256)) == {(64, 2, 2), (64, 2, 4), (64, 2, 8)}
    # fp8: wide single-stage tiles at every size, one program per 4 tiles of the 64-column grouping
    assert shapes(torch.float8_e4m3fn, (1, 255)) == {(128, 1, 1)}
    assert shapes(torch.float8_e4m3fn, (256,)) == {(128, 1, 2)}
    assert decode_tile_shape(torch.float8_e4m3fn, 131072) == (128, 1, 2)
    assert decode_tile_shape(torch.bfloat16, 16383) == (128, 1, 2)
    assert decode_tile_shape(torch.bfloat16, 16384) == (64, 2, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dql", [1, 3])
def test_select_paged_decode(device, dtype, dql):
    token_topk, ratio = 64, 4
    k = token_topk // ratio
    inputs = _decode_inputs(
        device,
        seed=dql + 40,
        dtype=dtype,
        heads=8,
        head_dim=64,
        dql=dql,
        num_reqs=3,
        width=3,
        page_size=16,
    )
    q, k_cache, page_table, visible = inputs
    visible[-1] = k  # exactly k visible
    out = torch.full((q.shape[0], k), INT_POISON, dtype=torch.int32, device=device)
    qsa_select_paged_decode(q, k_cache, page_table, visible, token_topk, ratio, dql, out)
    scores = ref.decode_scores(*[t.cpu() for t in inputs], dql)
    assert_topk_matches(
        out, torch.nan_to_num(scores, nan=float("-inf")), visible.cpu(), k, rtol=score_rtol(dtype)
    )


def test_decode_unaligned_metadata_views(device):
    gen = torch.Generator().manual_seed(9)
    q, k_cache, page_table, visible = _decode_inputs(
        device, seed=9, dtype=torch.bfloat16, heads=4, head_dim=64, dql=1, num_reqs=3
    )
    pt_big = torch.cat(
        [torch.zeros(1, page_table.shape[1], dtype=torch.int32, device=device), page_table]
    )
    vis_big = torch.cat([torch.zeros(1, dtype=torch.int32, device=device), visible])
    got = _scores((q, k_cache, pt_big[1:], vis_big[1:]), 1)
    assert_scores_match(
        got,
        ref.decode_scores(q.cpu(), k_cache.cpu(), page_table.cpu(), visible.cpu(), 1),
        rtol=1e-5,
    )
    del gen


def _select_args(device):
    q, k_cache, page_table, visible = _decode_inputs(
        device, seed=1, dtype=torch.bfloat16, heads=2, head_dim=64, dql=1, num_reqs=2
    )
    out = torch.zeros(2, 4, dtype=torch.int32, device=device)
    return dict(
        q=q,
        k_cache=k_cache,
        page_table=page_table,
        visible_blocks=visible,
        token_topk=16,
        compress_ratio=4,
        decode_query_len=1,
        block_indices=out,
    )


@pytest.mark.parametrize(
    "change,exc,word",
    [
        (lambda a: a.update(q=a["q"].float()), TypeError, "q"),
        (lambda a: a.update(q=a["q"].to(torch.float8_e4m3fn)), TypeError, "k_cache"),
        (lambda a: a.update(token_topk=18), ValueError, "token_topk"),
        (lambda a: a.update(page_table=a["page_table"].long()), TypeError, "page_table"),
        (lambda a: a.update(visible_blocks=a["visible_blocks"][:1]), ValueError, "visible_blocks"),
        (lambda a: a.update(block_indices=a["block_indices"][:, :3]), ValueError, "block_indices"),
        (lambda a: a.update(decode_query_len=0), ValueError, "decode_query_len"),
        (lambda a: a.update(q=a["q"][:, :, :32]), ValueError, "head_dim"),
        (
            lambda a: a.update(q=a["q"].transpose(0, 1).contiguous().transpose(0, 1)),
            ValueError,
            "contiguous",
        ),
    ],
)
def test_decode_bad_input(device, change, exc, word):
    args = _select_args(device)
    change(args)
    with pytest.raises(exc, match=word):
        qsa_select_paged_decode(**args)


def test_decode_tuning_configs_vary_only_the_tuned_fields():
    from dataclasses import replace

    from kernels import decode_launch_config, decode_tuning_configs

    tuned = dict(block_n=0, num_warps=0, num_stages=0, tiles_per_program=0)
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        base = decode_launch_config(dtype, 32, 128, 1, 8, 32768)
        configs = decode_tuning_configs(base)
        assert next(iter(configs.items())) == ("dispatched", base)
        assert len(set(configs.values())) == len(configs) > 100  # each design timed once
        assert {replace(c, **tuned) for c in configs.values()} == {replace(base, **tuned)}
