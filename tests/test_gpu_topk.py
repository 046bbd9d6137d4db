"""GPU: every top-k design the benchmarks time, at every row count they try, run as they run
it: one launch list built once, then run again and again (eagerly and replayed from a CUDA
graph), its output poisoned before each run and checked exact after it."""

import pytest
import torch

from kernels import ragged_topk_launches, topk_tuning_configs

from _helpers import INT_POISON

pytestmark = pytest.mark.gpu

K = 512
ROWS = (8, 64, 256, 512, 1024, 2048, 4096)  # tools/bench_topk_rows.py's default rows
# its default width (the split path), the widths one program per row takes, and one whose
# rows may take the one-launch split at a smaller chunk
WIDTHS = (2048, 8192, 16384, 32768)
# lists of 4096 candidates (k = 2048), finished apart at every row count: the shapes
# tools/bench_topk_rows.py tried for them
LONG_K = 2048
LONG_ROWS = (16, 64, 128)
LONG_WIDTHS = (65536, 131072)
SHAPES = [(rows, cols, K) for rows in ROWS for cols in WIDTHS]
SHAPES += [(rows, cols, LONG_K) for rows in LONG_ROWS for cols in LONG_WIDTHS]
DESIGNS = sorted({name for rows, cols, k in SHAPES for name in topk_tuning_configs(cols, k, rows)})


def _inputs(rows, cols, k, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(rows, cols, device="cuda", generator=gen)
    logits[: rows // 4] = logits[: rows // 4].round(decimals=1)  # ties at the threshold
    lengths = torch.randint(k + 1, cols + 1, (rows,), device="cuda", generator=gen)
    lengths[:3] = torch.tensor([cols, k, k + 1])  # a full row, a short row, one over k
    return logits, lengths.to(torch.int32)


def _assert_exact(out, logits, lengths):
    """Tie-aware and vectorized (thousands of rows): every row's k indices are distinct, in
    range, and their values are the row's k largest; rows no longer than k are 0..n-1, -1."""
    rows, k = out.shape
    cols = torch.arange(logits.shape[1], device="cuda")
    assert not (out == INT_POISON).any(), "some output elements were not written"
    short = lengths <= k
    want_short = torch.where(cols[:k] < lengths[:, None], cols[:k], -1).to(torch.int32)
    assert torch.equal(out[short], want_short[short]), "a short row is not 0..n-1 then -1"
    long_rows = ~short
    got = out[long_rows].long()
    n = lengths[long_rows].long()[:, None]
    assert bool(((got >= 0) & (got < n)).all()), "an index outside its row's length"
    assert bool((got.sort(dim=1).values.diff(dim=1) > 0).all()), "indices not distinct"
    masked = logits[long_rows].masked_fill(cols >= n, float("-inf"))
    best = masked.topk(k, dim=1).values
    picked = masked.gather(1, got).sort(dim=1, descending=True).values
    assert torch.equal(picked, best), f"{rows} rows: selected values are not the top-k"


@pytest.mark.parametrize("rows,cols,k", SHAPES)
@pytest.mark.parametrize("design", DESIGNS)
def test_topk_design_reruns_exact(rows, cols, k, design):
    configs = topk_tuning_configs(cols, k, rows)
    if design not in configs:
        pytest.skip(f"{design} is not tried at {rows} x {cols}, k = {k}")
    logits, lengths = _inputs(rows, cols, k, seed=rows)
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    launches = ragged_topk_launches(logits, lengths, k, out, config=configs[design])

    def run():
        for launch in launches:
            launch.run()

    for _ in range(3):  # eager reruns of one launch list (its workspace reused)
        out.fill_(INT_POISON)
        run()
        torch.cuda.synchronize()
        _assert_exact(out, logits, lengths)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for seed in range(3):  # replays over fresh values in the same buffers
        fresh, fresh_lengths = _inputs(rows, cols, k, seed=1000 * rows + seed)
        logits.copy_(fresh)
        lengths.copy_(fresh_lengths)
        out.fill_(INT_POISON)
        graph.replay()
        torch.cuda.synchronize()
        _assert_exact(out, logits, lengths)


@pytest.mark.parametrize(
    "rows,cols,k", [(8, 32768, 512), (64, 32768, 512), (256, 32768, 512), (16, 131072, 2048)]
)
def test_topk_overflowing_lists_exact(rows, cols, k):
    # rows whose candidates fit the list, overflow it into its reserve, or overflow the
    # reserve too (many columns tied at the row's top value), on each dispatched path: coop,
    # split finished by the collect launch, split finished apart, long lists
    candidates = topk_tuning_configs(cols, k, rows)["dispatched"].candidates
    gen = torch.Generator(device="cuda").manual_seed(rows + k)
    logits = torch.randn(rows, cols, device="cuda", generator=gen)
    ties = [0, k, candidates + candidates // 2, 3 * candidates]
    for row in range(rows):
        tied = torch.randperm(cols, device="cuda", generator=gen)[: ties[row % len(ties)]]
        logits[row, tied] = 5.0
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    launches = ragged_topk_launches(logits, lengths, k, out)

    def run():
        for launch in launches:
            launch.run()

    out.fill_(INT_POISON)
    run()
    torch.cuda.synchronize()
    _assert_exact(out, logits, lengths)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(2):
        out.fill_(INT_POISON)
        graph.replay()
        torch.cuda.synchronize()
        _assert_exact(out, logits, lengths)
