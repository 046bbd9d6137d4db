"""GPU-only checks (run through the device tool): CUDA-graph capture, full-size shapes."""

import pytest
import torch

from kernels import (
    decode_launch_config,
    qsa_paged_decode_scores,
    qsa_select_paged_decode,
    ragged_topk,
)
from kernels import reference as ref

from _helpers import INT_POISON, assert_scores_match, assert_topk_matches

pytestmark = pytest.mark.gpu


def _decode_case(num_reqs, dql, dtype, width=64, page_size=64, heads=32, head_dim=128, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    num_blocks = num_reqs * width
    k_cache = torch.randn(num_blocks, page_size, 1, head_dim, device="cuda", generator=gen).to(
        dtype
    )
    q = torch.randn(num_reqs * dql, heads, head_dim, device="cuda", generator=gen).to(dtype)
    page_table = (
        torch.randperm(num_blocks, device="cuda", generator=gen)
        .to(torch.int32)
        .view(num_reqs, width)
    )
    visible = torch.randint(
        0, width * page_size + 1, (num_reqs * dql,), device="cuda", generator=gen, dtype=torch.int32
    )
    return q, k_cache, page_table, visible


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_decode_select_cuda_graph_replay(dtype):
    token_topk, ratio, dql, reqs = 2048, 4, 2, 16
    q, k_cache, page_table, visible = _decode_case(reqs, dql, dtype)
    out = torch.full(
        (q.shape[0], token_topk // ratio), INT_POISON, dtype=torch.int32, device="cuda"
    )
    qsa_select_paged_decode(
        q, k_cache, page_table, visible, token_topk, ratio, dql, out
    )  # compile outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        qsa_select_paged_decode(q, k_cache, page_table, visible, token_topk, ratio, dql, out)
    for seed in range(3):
        q2, k2, pt2, vis2 = _decode_case(reqs, dql, dtype, seed=seed + 10)
        q.copy_(q2)
        k_cache.copy_(k2)
        page_table.copy_(pt2)
        visible.copy_(vis2)
        out.fill_(INT_POISON)
        graph.replay()
        torch.cuda.synchronize()
        eager = torch.full_like(out, INT_POISON)
        qsa_select_paged_decode(q2, k2, pt2, vis2, token_topk, ratio, dql, eager)
        assert torch.equal(out.sort(dim=1).values, eager.sort(dim=1).values)


@pytest.mark.parametrize("num_reqs,expect_tpp", [(8, 2), (40, 2), (128, 4), (256, 8)])
def test_decode_tiles_per_program_by_shape(num_reqs, expect_tpp):
    width = 512  # 32K columns
    assert (
        decode_launch_config(torch.bfloat16, 32, 128, 1, num_reqs, width * 64).tiles_per_program
        == expect_tpp
    )
    q, k_cache, page_table, visible = _decode_case(
        num_reqs, 1, torch.bfloat16, width=width, seed=num_reqs
    )
    logits = torch.full((num_reqs, width * 64), float("nan"), device="cuda")
    qsa_paged_decode_scores(q, k_cache, page_table, visible, 1, logits)
    rows = torch.arange(0, num_reqs, max(1, num_reqs // 6))  # spot-check rows against float64
    want = ref.decode_scores(
        q[rows].cpu(), k_cache.cpu(), page_table[rows].cpu(), visible[rows].cpu(), 1
    )
    assert_scores_match(logits[rows], want, rtol=1e-3)


def test_topk_full_size_exact():
    gen = torch.Generator(device="cuda").manual_seed(1)
    logits = torch.randn(64, 32768, device="cuda", generator=gen)
    lengths = torch.randint(0, 32769, (64,), device="cuda", generator=gen, dtype=torch.int32)
    lengths[:4] = torch.tensor([0, 512, 513, 32768], dtype=torch.int32)
    out = torch.full((64, 512), INT_POISON, dtype=torch.int32, device="cuda")
    ragged_topk(logits, lengths, 512, out)
    assert_topk_matches(out, logits, lengths.cpu(), 512)


def test_fast_launch_path_gives_tritons_results():
    from kernels import qsa_select_paged_prefill
    from kernels._fast_launch import fast_launch_stats, triton_launches_only

    q, k_cache, page_table, visible = _decode_case(64, 1, torch.bfloat16, width=512, seed=3)
    logits = torch.randn(64, 32768, device="cuda")
    lengths = visible.clone()

    def run_ops():
        block_indices = torch.full((64, 512), INT_POISON, dtype=torch.int32, device="cuda")
        qsa_select_paged_decode(q, k_cache, page_table, visible, 2048, 4, 1, block_indices)
        topk = torch.full((64, 2048), INT_POISON, dtype=torch.int32, device="cuda")
        ragged_topk(logits, lengths, 2048, topk)
        starts = torch.tensor([0, 64], dtype=torch.int32, device="cuda")
        selected = torch.full((64, 512), INT_POISON, dtype=torch.int32, device="cuda")
        qsa_select_paged_prefill(
            q, k_cache, page_table[:1].contiguous(), starts, visible, 2048, 4, 64, selected, 131072
        )
        return [t.sort(dim=1).values for t in (block_indices, topk, selected)]

    with triton_launches_only():
        want = run_ops()
    run_ops()  # binds each variant to the fast path and prepares the ops that replay
    before = fast_launch_stats()
    got = run_ops()
    torch.cuda.synchronize()
    after = fast_launch_stats()
    assert after["triton"] == before["triton"]  # no launch went through JITFunction.run
    assert after["prepared"] - before["prepared"] == 2  # the decode select and the top-k
    assert after["fast"] - before["fast"] >= 1  # the prefill select's launches
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    # none of these kernels needs a scratch buffer: each launch calls Triton's C entry point
    from kernels._fast_launch import _bound

    assert _bound and all(b.launch is not b.compiled.run for b in _bound.values())


def test_prepared_op_calls_give_tritons_results_eagerly_and_in_a_graph():
    """Repeated calls of the decode select, ragged_topk (one program per row, and split) and the
    expansion replay their prepared launches: the same results as launches through Triton,
    eagerly and replayed from a CUDA graph captured while replaying."""
    from kernels import expand_qsa_block_indices
    from kernels._fast_launch import fast_launch_stats, triton_launches_only

    q, k_cache, page_table, visible = _decode_case(8, 1, torch.bfloat16, width=32, seed=5)
    logits = torch.randn(8, 4096, device="cuda")
    lengths = torch.randint(0, 4097, (8,), device="cuda", dtype=torch.int32)
    wide = torch.randn(4, 32768, device="cuda")  # the split path: a workspace every call
    wide_lengths = torch.tensor([32768, 512, 20000, 9000], device="cuda", dtype=torch.int32)
    positions = visible.clone() * 4 + 3
    outs = [
        torch.empty(8, 512, dtype=torch.int32, device="cuda"),
        torch.empty(8, 300, dtype=torch.int32, device="cuda"),
        torch.empty(8, 2048 + 4, dtype=torch.int32, device="cuda"),
        torch.empty(4, 512, dtype=torch.int32, device="cuda"),
    ]

    def run_ops():
        for out in outs:
            out.fill_(INT_POISON)
        qsa_select_paged_decode(q, k_cache, page_table, visible, 2048, 4, 1, outs[0])
        ragged_topk(logits, lengths, 300, outs[1])
        expand_qsa_block_indices(outs[0], positions, visible, 4, 2048, outs[2])
        ragged_topk(wide, wide_lengths, 512, outs[3])

    def results():
        return [
            outs[0].sort(dim=1).values,
            outs[1].sort(dim=1).values,
            outs[2].clone(),
            outs[3].sort(dim=1).values,
        ]

    with triton_launches_only():
        run_ops()
        want = results()
    run_ops()  # binds and prepares
    before = fast_launch_stats()["prepared"]
    run_ops()
    torch.cuda.synchronize()
    assert fast_launch_stats()["prepared"] - before == 4
    assert all(torch.equal(g, w) for g, w in zip(results(), want))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run_ops()  # warm the graph's stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_ops()
    for out in outs:
        out.fill_(INT_POISON)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(g, w) for g, w in zip(results(), want))
