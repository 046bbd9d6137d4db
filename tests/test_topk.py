import dataclasses
import re

import pytest
import torch

from kernels import (
    COOP_MAX_PARTS,
    COOP_MAX_PROGRAMS,
    SINGLE_PASS_MAX_COLS,
    SPLIT_FINISH_APART_MIN_ROWS,
    SPLIT_MANY_ROWS_MIN_COLS,
    SPLIT_MIN_COLS,
    TopkConfig,
    ragged_topk,
    ragged_topk_launch,
    ragged_topk_launches,
    topk_launch_config,
    topk_row_thresholds,
    topk_tuning_configs,
)
from kernels.topk import (
    BOUND_SLACK,
    COOP_CHUNKS,
    COOP_DISPATCHED,
    COOP_MIN_COLS,
    LISTED_APPEND,
    LISTED_MIN_COLS,
    SPLIT_APART_CHUNK,
    SPLIT_APART_MIN_CANDIDATES,
    SPLIT_APART_WARPS,
    _coop_chunk,
)

from _helpers import INT_POISON, assert_topk_matches

_WIDE_FEW_ROWS = "coop" if COOP_DISPATCHED else "split"  # what few rows of a split width take


def _lengths_around(k, width, gen):
    # rows shorter than k, equal to k, one past k, length 0, full width, over-long, and random
    fixed = [0, 1, max(k - 1, 0), k, k + 1, width, width + 5]
    rand = torch.randint(0, width + 1, (5,), generator=gen).tolist()
    return torch.tensor([min(x, width + 5) for x in fixed + rand], dtype=torch.int32)


@pytest.mark.parametrize(
    "width,k", [(64, 1), (300, 7), (1000, 64), (1500, 100), (2100, 2048), (4096, 512), (5000, 3000)]
)
def test_topk_random_rows(device, width, k):
    gen = torch.Generator().manual_seed(width * 31 + k)
    lengths = _lengths_around(k, width, gen)
    logits = torch.randn(len(lengths), width, generator=gen)
    out = torch.full((len(lengths), k), INT_POISON, dtype=torch.int32)
    ragged_topk(logits.to(device), lengths.to(device), k, out_dev := out.to(device))
    assert_topk_matches(out_dev, logits, lengths, k)


def test_topk_ties_and_negative_values(device):
    gen = torch.Generator().manual_seed(7)
    width, k = 700, 50
    # few distinct values, negative and zero (both signs), so the threshold is tied
    logits = torch.randint(-3, 3, (6, width), generator=gen).float() * 0.5
    logits[0, :] = -0.0
    logits[1, :] = 1.0
    lengths = torch.tensor([width, width, 600, 51, 50, 333], dtype=torch.int32)
    out = torch.full((6, k), INT_POISON, dtype=torch.int32, device=device)
    ragged_topk(logits.to(device), lengths.to(device), k, out)
    assert_topk_matches(out, logits, lengths, k)


def test_topk_row_stride_and_unaligned_views(device):
    gen = torch.Generator().manual_seed(11)
    big = torch.randn(9, 1100, generator=gen)
    logits = big[:, :1000]  # row stride 1100, not contiguous as a whole
    lengths_all = torch.randint(0, 1001, (12,), generator=gen, dtype=torch.int32)
    lengths = lengths_all[3:12]  # unaligned data pointer
    out_all = torch.full((11, 40), INT_POISON, dtype=torch.int32)
    out_dev = out_all.to(device)
    ragged_topk(logits.to(device), lengths.to(device), 40, out_dev[1:10])
    out_all = out_dev.cpu()
    assert_topk_matches(out_all[1:10], logits, lengths, 40)
    assert (out_all[0] == INT_POISON).all() and (out_all[10] == INT_POISON).all(), (
        "wrote outside the view"
    )


def test_topk_streaming_path(device):
    # wider than the single-pass limit, one program per row (the streaming branch by config:
    # dispatch sends such widths to the split path)
    gen = torch.Generator().manual_seed(3)
    width, k = SINGLE_PASS_MAX_COLS + 2000, 300
    lengths = torch.tensor([width, SINGLE_PASS_MAX_COLS + 1, 299], dtype=torch.int32)
    logits = torch.randn(3, width, generator=gen)
    out = torch.full((3, k), INT_POISON, dtype=torch.int32, device=device)
    ragged_topk_launch(
        logits.to(device),
        lengths.to(device),
        k,
        out,
        config=TopkConfig("streaming", 8192, 16, 1024),
    ).run()
    assert_topk_matches(out, logits, lengths, k)


@pytest.mark.parametrize(
    "design", ["single", "streaming", "split", "split.apart", "coop", "listed"]
)
def test_topk_kth_largest_on_a_search_midpoint(device, design):
    # the searches stop once exactly k keys lie at or above the low end of their range; here
    # the k-th largest value (2.0, whose key 2**30 is the bisection's second midpoint) sits on
    # that low end, so it must be taken with the k - 1 values above it
    width, k = 3000, 64
    gen = torch.Generator().manual_seed(8)
    lengths = torch.tensor([width, 2000, k + 1], dtype=torch.int32)
    logits = torch.rand(3, width, generator=gen) * 0.9 + 0.05
    for row, n in enumerate(lengths.tolist()):
        cols = torch.randperm(n, generator=gen)[:k]
        logits[row, cols[:-1]] = 3.0
        logits[row, cols[-1]] = 2.0
    config = {
        "single": topk_launch_config(width, k),
        "streaming": TopkConfig("streaming", 1024, 4, 1024),
        "split": TopkConfig("split", 512, 4, 0, candidates=256, collect_warps=4),
        "split.apart": TopkConfig(
            "split", 512, 4, 0, candidates=256, collect_warps=4, finish_warps=2
        ),
        "coop": TopkConfig("coop", 512, 4, 1024, candidates=256),
        "listed": TopkConfig("listed", 4096, 4, 1024, candidates=256, group=4, append=512),
    }[design]
    out = torch.full((3, k), INT_POISON, dtype=torch.int32, device=device)
    for launch in ragged_topk_launches(logits.to(device), lengths.to(device), k, out, config):
        launch.run()
    assert_topk_matches(out, logits, lengths, k)


_SMALL_CHUNK_ROWS = [
    (256, 700, 50, True, 1024),
    (512, 3000, 333, True, 1024),
    (1024, 5000, 300, False, 1024),
    (256, 200, 500, False, 1024),
    (1024, 2500, 1024, True, 2048),
    (256, 900, 1, False, 1024),
]
# candidate lists that overflow: the finishing program streams the row instead
_OVERFLOWING_ROWS = [(256, 1200, 150, True, 64), (512, 1100, 100, False, 64)]


def _rows_tied_at_the_threshold(gen, width, ties_per_row):
    # one row per tie count: that many columns (spread over the row) share the row's top value,
    # so every chunk's bound is that value and every tied column is a candidate
    logits = torch.randn(len(ties_per_row), width, generator=gen)
    for row, ties in enumerate(ties_per_row):
        cols = torch.randperm(width, generator=gen)[:ties]
        logits[row, cols] = 5.0
    return logits


@pytest.mark.parametrize("design", ["split", "split.apart", "coop", "listed"])
def test_topk_overflowing_lists_finish_from_the_reserve_or_the_row(device, design):
    # a row whose candidates fit the list is finished from it; one that overflows it but fits
    # its reserve (as many slots again) from the list, streamed; one past the reserve by
    # streaming the row: all exact, and the reserve holds every column of the second
    gen = torch.Generator().manual_seed(len(design))
    chunk, width, k, candidates = 256, 2048, 40, 64
    ties_per_row = [0, 100, 200, 128]  # in the list, in the reserve, past it, at its end
    logits = _rows_tied_at_the_threshold(gen, width, ties_per_row)
    logits[0] = logits[0, :chunk].repeat(width // chunk)  # each chunk's share: k candidates
    lengths = torch.full((len(ties_per_row),), width, dtype=torch.int32)
    out = torch.full((len(ties_per_row), k), INT_POISON, dtype=torch.int32, device=device)
    if design == "coop":
        cfg = TopkConfig("coop", chunk, 4, 1024, candidates=candidates)
    elif design == "listed":
        cfg = TopkConfig("listed", width, 4, 1024, candidates=candidates, append=chunk)
    else:
        apart = 2 if design == "split.apart" else 0
        cfg = TopkConfig(
            "split", chunk, 4, 0, candidates=candidates, collect_warps=4, finish_warps=apart
        )
    launches = ragged_topk_launches(logits.to(device), lengths.to(device), k, out, config=cfg)
    for launch in launches:
        launch.run()
    assert_topk_matches(out, logits, lengths, k)
    lists = {"coop": launches[0].args[3], "listed": launches[0].args[2]}.get(design)
    lists = (launches[1].args[4] if lists is None else lists).cpu()
    reserve = 2 * candidates
    assert lists.numel() == len(ties_per_row) * reserve
    if design.startswith("split"):  # it leaves its counts: the rows took the three branches
        counts = launches[0].args[2][: len(ties_per_row)].cpu().tolist()
        assert counts[0] <= candidates < counts[1] <= reserve < counts[2], counts
        assert counts[3] == reserve, counts
    listed = set(lists[reserve : 2 * reserve].tolist())  # row 1: its 100 tied columns
    tied = set(torch.nonzero(logits[1] == 5.0).flatten().tolist())
    assert tied <= listed, sorted(tied - listed)[:8]


@pytest.mark.parametrize(
    "chunk,width,k,ties,candidates,finish_warps",
    [(*row, 0) for row in _SMALL_CHUNK_ROWS + _OVERFLOWING_ROWS]
    + [(*row, 2) for row in _SMALL_CHUNK_ROWS + _OVERFLOWING_ROWS],
)
def test_topk_split_path_small_chunks(device, chunk, width, k, ties, candidates, finish_warps):
    # the split path's kernels with small chunks: many programs per row, atomics across them,
    # ties at the threshold spread over chunks, k wider than a chunk, rows of length <= k;
    # rows finished by the last collect program of each row (loading its chunk first), or by a
    # third launch (the collect programs loading their chunk after the row's bound)
    gen = torch.Generator().manual_seed(chunk * 7 + k + candidates)
    lengths = _lengths_around(k, width, gen)
    logits = torch.randn(len(lengths), width, generator=gen)
    if ties:
        logits = logits.round(decimals=1) - 0.3  # both signs, many equal values
    out = torch.full((len(lengths), k), INT_POISON, dtype=torch.int32, device=device)
    launches = ragged_topk_launches(
        logits.to(device),
        lengths.to(device),
        k,
        out,
        config=TopkConfig(
            "split",
            chunk,
            4,
            0,
            candidates=candidates,
            collect_warps=4,
            finish_warps=finish_warps,
            collect_preload=not finish_warps,  # as dispatched: rows finished apart load late
        ),
    )
    assert len(launches) == (3 if finish_warps else 2)
    for launch in launches:
        launch.run()
    assert_topk_matches(out, logits, lengths, k)


def _split_chunk_bounds(device, logits, lengths, k, chunk, **fields):
    """The split path's chunk bounds [rows, chunks] of one top-k call (its result checked)."""
    rows, width = logits.shape
    out = torch.full((rows, k), INT_POISON, dtype=torch.int32, device=device)
    cfg = TopkConfig("split", chunk, 4, 0, candidates=1024, collect_warps=4, **fields)
    launches = ragged_topk_launches(logits.to(device), lengths.to(device), k, out, config=cfg)
    for launch in launches:
        launch.run()
    assert_topk_matches(out, logits, lengths, k)
    nchunks = -(-width // chunk)
    return launches[0].args[3][: rows * nchunks].view(rows, nchunks).cpu()


def _order_keys(logits):
    keys = logits.view(torch.int32)
    return keys ^ ((keys >> 31) & 0x7FFFFFFF)


@pytest.mark.parametrize(
    "group,ties,slack", [(2, False, 0), (4, True, 0), (8, False, 0), (8, True, 0), (8, False, 4)]
)
def test_topk_split_bound_over_group_maxima(device, group, ties, slack):
    # rows of 8 full chunks with a small share: the bound searches group maxima; every chunk's
    # bound must still have its share of keys at or above it, and the result stays exact;
    # rows of 2-3 chunks (share too large for the maxima) search every key
    gen = torch.Generator().manual_seed(group + ties)
    chunk, k = 1024, 64
    logits = torch.randn(5, 8192, generator=gen)
    if ties:
        logits = logits.round(decimals=1)
    lengths = torch.tensor([8192, 8192 - 5, 2048, 3000, 40], dtype=torch.int32)
    bounds = _split_chunk_bounds(device, logits, lengths, k, chunk, group=group, bound_slack=slack)
    keys = _order_keys(logits)
    for row, n in enumerate(lengths.tolist()):
        full = n // chunk
        share = -(-k // max(full, 1))
        for c in range(full):
            at_least = int((keys[row, c * chunk : (c + 1) * chunk] >= bounds[row, c]).sum())
            assert at_least >= share, (row, c, at_least, share)


@pytest.mark.parametrize("group", [1, 8])
def test_topk_split_bound_slack_stops_short_of_the_share(device, group):
    # with bound_slack the chunk bounds stop once within a quarter of their share: each is still
    # a valid bound, never above the exact search's, and lower for some chunks; the result
    # stays exact either way
    gen = torch.Generator().manual_seed(group)
    chunk, k = 1024, 64
    logits = torch.randn(4, 8192, generator=gen)
    lengths = torch.tensor([8192, 8190, 6000, 4096], dtype=torch.int32)
    exact = _split_chunk_bounds(device, logits, lengths, k, chunk, group=group)
    loose = _split_chunk_bounds(
        device, logits, lengths, k, chunk, group=group, bound_slack=BOUND_SLACK
    )
    keys = _order_keys(logits)
    lowered = 0
    for row, n in enumerate(lengths.tolist()):
        full = n // chunk
        share = -(-k // full)
        for c in range(full):
            chunk_keys = keys[row, c * chunk : (c + 1) * chunk]
            assert int((chunk_keys >= loose[row, c]).sum()) >= share, (row, c)
            assert loose[row, c] <= exact[row, c], (row, c)
            if group == 1:  # every key searched: the loose bound is within its slack
                at_least = int((chunk_keys >= loose[row, c]).sum())
                assert at_least <= share + share // BOUND_SLACK or loose[row, c] == exact[row, c]
            lowered += int(loose[row, c] < exact[row, c])
    assert lowered > 0


_SMALL_SPLIT = {
    "split": TopkConfig("split", 512, 4, 0, candidates=256, collect_warps=4),
    "split.slack": TopkConfig(
        "split", 512, 4, 0, candidates=256, collect_warps=4, bound_slack=BOUND_SLACK
    ),
    "coop": TopkConfig("coop", 512, 4, 1024, candidates=256),
    "coop.slack": TopkConfig("coop", 512, 4, 1024, candidates=256, bound_slack=BOUND_SLACK),
    "listed": TopkConfig("listed", 4096, 4, 1024, candidates=256, group=4, append=1024),
    "listed.slack": TopkConfig(
        "listed", 4096, 4, 1024, candidates=256, group=4, bound_slack=BOUND_SLACK, append=1024
    ),
}


@pytest.mark.parametrize("path", sorted(_SMALL_SPLIT))
@pytest.mark.parametrize("spread", ["scaled", "outlier", "equal", "negative", "skewed"])
def test_topk_split_value_ranges(device, spread, path):
    # the split path's bounds on rows of tiny and huge scales, with outliers, all values equal
    # (every column a candidate: the list overflows), only negative values
    gen = torch.Generator().manual_seed(len(spread))
    width, k = 3000, 200
    logits = torch.randn(4, width, generator=gen)
    if spread == "scaled":
        logits = logits * torch.tensor([[1e-30], [1e-3], [1e3], [1e30]])
    elif spread == "outlier":
        logits[:, 17] = 1e30
        logits[1, 99] = -1e30
    elif spread == "equal":
        logits[:] = 0.25
        logits[3, :] = -0.0
    elif spread == "negative":
        logits = -logits.abs() - 1.0
    else:  # one chunk holds all of a row's top values: its share of the bound is far too small
        logits[:, 1024:1536] += 100.0
    lengths = torch.tensor([width, 2999, 1500, 201], dtype=torch.int32)
    out = torch.full((4, k), INT_POISON, dtype=torch.int32, device=device)
    for launch in ragged_topk_launches(
        logits.to(device), lengths.to(device), k, out, config=_SMALL_SPLIT[path]
    ):
        launch.run()
    assert_topk_matches(out, logits, lengths, k)


@pytest.mark.parametrize("k", [512, 1500, 2048])
def test_topk_split_candidate_list_sized_from_k(device, k):
    # dispatch sizes the candidate list from k: a well-mixed row's candidates fit (no fallback)
    gen = torch.Generator().manual_seed(k)
    width = SPLIT_MIN_COLS + 3000
    cfg = topk_launch_config(width, k, COOP_MAX_PROGRAMS)  # too many programs for coop
    assert cfg.path == "split" and cfg.candidates >= max(2048, k + k // 2)
    assert topk_launch_config(width, k).candidates == cfg.candidates  # coop's list too
    logits = torch.rand(3, width, generator=gen)
    lengths = torch.tensor([width, width - 1000, SPLIT_MIN_COLS], dtype=torch.int32)
    out = torch.full((3, k), INT_POISON, dtype=torch.int32, device=device)
    launches = ragged_topk_launches(logits.to(device), lengths.to(device), k, out, cfg)
    for launch in launches:
        launch.run()
    assert_topk_matches(out, logits, lengths, k)
    counts = launches[0].args[2][:3].cpu()
    assert (counts >= k).all() and (counts <= cfg.candidates).all(), counts
    assert cfg.group == {512: 8, 1500: 4, 2048: 4}[k], (
        cfg
    )  # 4+ group maxima per needed key of a 32K row


def test_topk_bound_slack_only_where_the_list_has_room():
    # loose chunk bounds add ~15% candidates: dispatched only where the list holds 3 k, on
    # every path that searches chunk bounds; the exact bounds stay a timed design beside them
    for k in (1, 64, 512, 682, 683, 1000, 1365, 2048, 2730):
        for width, rows in ((16384, 1), (32768, 64), (8192, 256), (131072, 64), (32768, 4096)):
            cfg = topk_launch_config(width, k, rows)
            assert cfg.path in ("split", "coop"), (width, k, rows, cfg)
            room = cfg.candidates >= 3 * k
            assert cfg.bound_slack == (BOUND_SLACK if room else 0), (width, k, rows, cfg)
            assert room == (k <= 682), (k, cfg)
            designs = topk_tuning_configs(width, k, rows)
            if room:
                assert designs["bound.exact"] == dataclasses.replace(cfg, bound_slack=0)
            else:
                assert "bound.exact" not in designs


def test_topk_split_collect_depends_on_the_bound_launch_from_sm90():
    # Hopper on: the split path's collect launch is a programmatic dependent launch (a GPU
    # without griddepcontrol gets ordinary launches); unknown GPUs (planning stand-ins, CPU
    # tensors) are taken as sm_90-class; the coop path has one launch; the ordinary launches
    # stay a timed design beside the dependent ones
    for width, rows in ((32768, 64), (8192, 256), (131072, 64), (32768, 4096), (16384, 1)):
        for arch, dependent in ((None, True), (80, False), (89, False), (90, True), (120, True)):
            cfg = topk_launch_config(width, 512, rows, arch)
            assert cfg.dependent_launch == (dependent and cfg.path == "split"), (width, rows, arch)
        designs = topk_tuning_configs(width, 512, rows)
        after = designs.pop("launch.after", None)
        dispatched = designs["dispatched"]
        if dispatched.path == "split":
            assert after == dataclasses.replace(dispatched, dependent_launch=False)
        assert all(c.dependent_launch for c in designs.values() if c.path == "split"), width


def test_topk_rows_choose_where_split_rows_finish():
    # the row count moves the finishing step of a split top-k into its own launch, and the
    # scan of rows finished apart to smaller chunks of fewer warps; the candidate list stays
    few = topk_launch_config(32768, 512, SPLIT_FINISH_APART_MIN_ROWS - 1)
    many = topk_launch_config(32768, 512, SPLIT_FINISH_APART_MIN_ROWS)
    assert few.finish_warps == 0 and many.finish_warps > 0
    assert (few.candidates, few.group) == (many.candidates, many.group)
    assert (many.block, many.num_warps) == (SPLIT_APART_CHUNK, SPLIT_APART_WARPS)
    # collect programs of rows finished by their last one load their chunk before the row's
    # bound; those of rows finished apart (many rows, or a list too long to finish in the
    # collect launch) after it; the other choice is a timed design either way
    big_list = topk_launch_config(131072, 2048, 64)
    assert big_list.finish_warps > 0
    assert few.collect_preload and not many.collect_preload and not big_list.collect_preload
    for rows, cols, k, cfg in (
        (64, 32768, 512, few),
        (256, 32768, 512, many),
        (64, 131072, 2048, big_list),
    ):
        designs = topk_tuning_configs(cols, k, rows)
        other = designs["collect.preload" if cfg.finish_warps else "collect.late"]
        assert other == dataclasses.replace(cfg, collect_preload=not cfg.collect_preload)
        apart = [c for name, c in designs.items() if name.startswith("apart.")]
        assert apart and not any(c.collect_preload for c in apart), (rows, cols, k)
    assert topk_launch_config(4096, 512, 10 * SPLIT_FINISH_APART_MIN_ROWS) == topk_launch_config(
        4096, 512
    )
    from kernels import TensorMeta

    for rows, count in ((SPLIT_FINISH_APART_MIN_ROWS - 1, 2), (SPLIT_FINISH_APART_MIN_ROWS, 3)):
        launches = ragged_topk_launches(
            TensorMeta((rows, 32768), torch.float32),
            TensorMeta((rows,), torch.int32),
            512,
            TensorMeta((rows, 512), torch.int32),
        )
        assert len(launches) == count
        assert launches[1].options["FINISH"] == (count == 2)


def test_topk_long_candidate_lists_finish_apart_at_every_row_count():
    # a list of SPLIT_APART_MIN_CANDIDATES keys is finished by a launch of its own, one warp per
    # 512 candidates, even for few rows; the collect launch keeps the two-launch chunk and warps
    rows = SPLIT_FINISH_APART_MIN_ROWS - 1
    short = topk_launch_config(131072, 1365, rows)
    long = topk_launch_config(131072, 1366, rows)
    assert short.candidates < SPLIT_APART_MIN_CANDIDATES <= long.candidates
    assert short.finish_warps == 0
    assert long.finish_warps == long.candidates // 512
    assert (long.block, long.num_warps, long.collect_warps) == (
        short.block,
        short.num_warps,
        short.collect_warps,
    )
    assert "fused" in topk_tuning_configs(131072, 1366, rows)  # still timed beside it


def test_topk_many_rows_split_rows_one_program_would_take():
    # from SPLIT_FINISH_APART_MIN_ROWS rows on, rows wider than SPLIT_MANY_ROWS_MIN_COLS take a
    # wide row's finished-apart split; narrower rows, and fewer rows, one program per row
    few = topk_launch_config(SPLIT_MIN_COLS, 512, SPLIT_FINISH_APART_MIN_ROWS - 1)
    assert few.path == "single"
    many = topk_launch_config(SPLIT_MIN_COLS, 512, SPLIT_FINISH_APART_MIN_ROWS)
    assert many == topk_launch_config(4 * SPLIT_MIN_COLS, 512, SPLIT_FINISH_APART_MIN_ROWS)
    assert many.path == "split" and many.finish_warps > 0
    assert topk_launch_config(SPLIT_MANY_ROWS_MIN_COLS + 1, 512, 10**6).path == "split"
    assert topk_launch_config(SPLIT_MANY_ROWS_MIN_COLS, 512, 10**6).path == "single"
    assert topk_row_thresholds(SPLIT_MANY_ROWS_MIN_COLS, 512) == (SPLIT_FINISH_APART_MIN_ROWS,)
    # up to 8 rows of SPLIT_MIN_COLS fit coop's programs at its smallest chunk, 64 at its largest
    coop_rows = (9, 17, 33, 65) if COOP_DISPATCHED else ()
    assert topk_row_thresholds(SPLIT_MIN_COLS, 512) == (*coop_rows, SPLIT_FINISH_APART_MIN_ROWS)


@pytest.mark.parametrize("width", [SPLIT_MANY_ROWS_MIN_COLS + 1, 6000, SPLIT_MIN_COLS])
def test_topk_many_rows_split_is_exact_at_narrower_widths(device, width):
    # the config a call of many rows dispatches, on a few rows (the kernels do not depend on
    # the row count): partial last chunks, short rows, ties
    gen = torch.Generator().manual_seed(width)
    k = 512
    cfg = topk_launch_config(width, k, SPLIT_FINISH_APART_MIN_ROWS)
    logits = torch.randn(4, width, generator=gen)
    logits[1] = logits[1].round(decimals=1)
    lengths = torch.tensor([width, width - 77, k + 1, k], dtype=torch.int32)
    out = torch.full((4, k), INT_POISON, dtype=torch.int32, device=device)
    for launch in ragged_topk_launches(logits.to(device), lengths.to(device), k, out, config=cfg):
        launch.run()
    assert_topk_matches(out.cpu(), logits, lengths, k)


def test_topk_split_path_by_shape_with_views(device):
    # wider than SPLIT_MIN_COLS: dispatch's one-launch split path (few rows), on a row-strided
    # logits view and unaligned lengths/out views
    gen = torch.Generator().manual_seed(5)
    width, k = SPLIT_MIN_COLS + 900, 512
    assert topk_launch_config(width, 512, 4).path == _WIDE_FEW_ROWS
    big = torch.randn(4, width + 64, generator=gen)
    logits = big[:, :width]
    lengths_all = torch.tensor([0, width, 4100, 513, 512], dtype=torch.int32)
    out_all = torch.full((6, k), INT_POISON, dtype=torch.int32, device=device)
    ragged_topk(logits.to(device), lengths_all[1:].to(device), k, out_all[1:5])
    out_all = out_all.cpu()
    assert_topk_matches(out_all[1:5], logits, lengths_all[1:], k)
    assert (out_all[0] == INT_POISON).all() and (out_all[5] == INT_POISON).all(), (
        "wrote outside the view"
    )


@pytest.mark.parametrize("block", [1024, 2048])
def test_topk_streaming_constants_small_block(device, block):
    # the streaming branch's code with a small chunk, so several chunk boundaries are crossed
    gen = torch.Generator().manual_seed(block)
    width, k = 5000, 900
    lengths = torch.tensor([width, 4097, 1025, 901, 900, 0], dtype=torch.int32)
    logits = torch.randn(len(lengths), width, generator=gen).round(decimals=1)  # many ties
    out = torch.full((len(lengths), k), INT_POISON, dtype=torch.int32, device=device)
    launch = ragged_topk_launch(
        logits.to(device), lengths.to(device), k, out, config=TopkConfig("streaming", block, 4, 256)
    )
    launch.run()
    assert_topk_matches(out, logits, lengths, k)


def test_topk_buckets_are_finite():
    configs = {topk_launch_config(w, 512) for w in range(1, 200_000, 37)}
    assert len(configs) <= 8


@pytest.mark.parametrize(
    "bad,exc,word",
    [
        (dict(logits=torch.zeros(2, 8, dtype=torch.float16)), TypeError, "logits"),
        (dict(lengths=torch.zeros(2, dtype=torch.int64)), TypeError, "lengths"),
        (dict(out=torch.zeros(2, 3, dtype=torch.int32)), ValueError, "out"),
        (dict(k=0), ValueError, "k"),
        (dict(lengths=torch.zeros(3, dtype=torch.int32)), ValueError, "lengths"),
    ],
)
def test_topk_bad_input(bad, exc, word):
    args = dict(
        logits=torch.zeros(2, 8),
        lengths=torch.zeros(2, dtype=torch.int32),
        k=4,
        out=torch.zeros(2, 4, dtype=torch.int32),
    )
    args.update(bad)
    with pytest.raises(exc, match=word):
        ragged_topk(**args)


def test_topk_single_path_small_config(device):
    gen = torch.Generator().manual_seed(21)
    width, k = 3000, 333
    lengths = torch.tensor([width, 334, 333, 2000, 0], dtype=torch.int32)
    logits = (
        torch.randn(len(lengths), width, generator=gen).round(decimals=2) - 0.5
    )  # ties, both signs
    out = torch.full((len(lengths), k), INT_POISON, dtype=torch.int32, device=device)
    cfg = topk_launch_config(width, 512)
    ragged_topk_launch(
        logits.to(device),
        lengths.to(device),
        k,
        out,
        config=TopkConfig(cfg.path, cfg.block, cfg.num_warps, cfg.out_block),
    ).run()
    assert_topk_matches(out, logits, lengths, k)


def test_topk_split_limit_is_the_path_threshold(device):
    assert topk_launch_config(COOP_MIN_COLS, 512).path == "single"
    narrow_few_rows = "coop" if COOP_DISPATCHED else "single"
    assert topk_launch_config(COOP_MIN_COLS + 1, 512).path == narrow_few_rows
    assert topk_launch_config(SPLIT_MIN_COLS, 512, COOP_MAX_PROGRAMS).path == "single"
    assert topk_launch_config(SPLIT_MIN_COLS + 1, 512).path == _WIDE_FEW_ROWS
    assert topk_launch_config(SPLIT_MIN_COLS + 1, 512, COOP_MAX_PROGRAMS).path == "split"
    assert topk_launch_config(SINGLE_PASS_MAX_COLS + 1, 512).path == _WIDE_FEW_ROWS
    gen = torch.Generator().manual_seed(4)
    for width in (SPLIT_MIN_COLS, SPLIT_MIN_COLS + 1):
        k = 64
        lengths = torch.tensor([width, width - 1], dtype=torch.int32)
        logits = torch.randn(2, width, generator=gen)
        out = torch.full((2, k), INT_POISON, dtype=torch.int32, device=device)
        ragged_topk(logits.to(device), lengths.to(device), k, out)
        assert_topk_matches(out, logits, lengths, k)


def test_topk_device_mismatch_is_named():
    with pytest.raises(ValueError, match="lengths is on meta"):
        ragged_topk(
            torch.zeros(2, 8),
            torch.zeros(2, dtype=torch.int32, device="meta"),
            4,
            torch.zeros(2, 4, dtype=torch.int32),
        )


@pytest.mark.parametrize("design", ["split", "split.apart", "coop", "listed"])
def test_topk_launch_list_runs_again_exact(device, design):
    # a launch list built once and run again (as a CUDA graph replays it) over new values: its
    # workspace holds the last run's counters, and must not steer the next run
    width, k, rows = 3000, 100, 5
    gen = torch.Generator().manual_seed(11)
    split = topk_launch_config(width * 4, k, COOP_MAX_PROGRAMS)
    assert split.path == "split"
    config = {
        "split": dataclasses.replace(split, block=512, candidates=256),
        "split.apart": dataclasses.replace(
            split, block=512, candidates=256, finish_warps=4, collect_warps=split.num_warps
        ),
        "coop": dataclasses.replace(topk_launch_config(width * 4, k, 1), block=512, candidates=256),
        "listed": topk_tuning_configs(width, k, rows)["listed.w4"],
    }[design]
    logits = torch.randn(rows, width, generator=gen).to(device)
    lengths = torch.tensor([width, 2500, 1024, 101, 100], dtype=torch.int32).to(device)
    out = torch.empty(rows, k, dtype=torch.int32, device=device)
    launches = ragged_topk_launches(logits, lengths, k, out, config=config)
    for _ in range(2):
        logits.copy_(torch.randn(rows, width, generator=gen))
        out.fill_(INT_POISON)
        for launch in launches:
            launch.run()
        assert_topk_matches(out, logits.cpu(), lengths.cpu(), k)


def _coop_states_restored(states):
    # every row as a coop launch must leave it: no bound (the largest key), counters zero
    return bool((states[:, 0] == 2**31 - 1).all() and (states[:, 1:] == 0).all())


@pytest.mark.parametrize(
    "chunk,width,k,ties,candidates,group",
    [
        (256, 700, 50, True, 1024, 1),
        (512, 3000, 333, True, 1024, 1),
        (1024, 5000, 300, False, 1024, 1),
        (256, 200, 500, False, 1024, 1),
        (1024, 2500, 1024, True, 2048, 1),
        (1024, 8192, 64, False, 1024, 8),  # 8 full chunks: the bound over group maxima
        (1024, 8192, 64, True, 1024, 4),
        (1024, 8192, 64, False, 1024, -8),  # the same with a loose bound (bound_slack)
        (512, 3000, 333, True, 1024, -1),
        (256, 1200, 150, True, 64, 1),  # lists that overflow: the row is streamed instead
        (512, 1100, 100, False, 64, 1),
    ],
)
def test_topk_coop_path(device, chunk, width, k, ties, candidates, group):
    # the one-launch split: a row's programs meet at a barrier (the interpreter runs the launch
    # as its two halves), short rows, partial chunks, ties spread over chunks, k wider than a
    # chunk; twice on the same row states, which each call must leave as it found them
    gen = torch.Generator().manual_seed(chunk * 7 + k + candidates + group)
    lengths = _lengths_around(k, width, gen)
    logits = torch.randn(len(lengths), width, generator=gen)
    if ties:
        logits = logits.round(decimals=1) - 0.3
    # a negative group: that group with bound_slack
    slack = BOUND_SLACK if group < 0 else 0
    cfg = TopkConfig(
        "coop", chunk, 4, 1024, candidates=candidates, group=abs(group), bound_slack=slack
    )
    for _ in range(2):
        out = torch.full((len(lengths), k), INT_POISON, dtype=torch.int32, device=device)
        launches = ragged_topk_launches(logits.to(device), lengths.to(device), k, out, cfg)
        assert [launch.options["HALF"] for launch in launches] == [1, 2] if device == "cpu" else [0]
        for launch in launches:
            launch.run()
        assert_topk_matches(out, logits, lengths, k)
        assert _coop_states_restored(launches[0].args[2].cpu())


@pytest.mark.parametrize(
    "block,width,k,ties,group,append",
    [
        (1024, 700, 50, True, 1, 256),
        (4096, 3000, 333, True, 1, 1024),  # too few group maxima for k: every key searched
        (8192, 8192, 64, False, 8, 1024),  # the bound over group maxima
        (8192, 5000, 300, False, 4, 2048),
        (2048, 2048, 500, True, 1, 512),
        (4096, 4096, 100, False, 4, 4096),  # the row listed in one pass
        (8192, 8192, 1500, False, 8, 1024),  # fewer group maxima than 4 a key: every key
    ],
)
@pytest.mark.parametrize("slack", [0, BOUND_SLACK])
def test_topk_listed_path(device, block, width, k, ties, group, append, slack):
    # one program a row: a bound over group maxima (or every key), the row listed in blocks,
    # the finish from the list; short rows, ragged rows (maxima of columns past the row),
    # ties at the threshold
    gen = torch.Generator().manual_seed(block + width + k + group + slack)
    lengths = _lengths_around(k, width, gen)
    logits = torch.randn(len(lengths), width, generator=gen)
    if ties:
        logits = logits.round(decimals=1) - 0.3
    if group > 1 and 4 * k > block // group:  # one large key a group: its maxima would mislead
        logits[:, ::group] += 10.0
    candidates = 1024 if 2 * k <= 1024 else 4096
    cfg = TopkConfig(
        "listed",
        block,
        4,
        1024,
        candidates=candidates,
        group=group,
        bound_slack=slack,
        append=append,
    )
    out = torch.full((len(lengths), k), INT_POISON, dtype=torch.int32, device=device)
    for launch in ragged_topk_launches(logits.to(device), lengths.to(device), k, out, cfg):
        launch.run()
    assert_topk_matches(out, logits, lengths, k)


def test_topk_listed_designs_where_one_program_a_row_or_the_split_takes_them():
    # timed beside one program a row (and the split path of many rows) from LISTED_MIN_COLS to
    # SPLIT_MIN_COLS columns, at 4, 8 and 16 warps, and listing twice the keys a pass at 8 and
    # 16; never dispatched
    for width in (1000, LISTED_MIN_COLS - 1, LISTED_MIN_COLS, 3000, 8192, SPLIT_MIN_COLS + 1):
        for rows in (1, 64, 256, 4096):
            for k in (512, 2048):
                designs = topk_tuning_configs(width, k, rows)
                listed = {name: cfg for name, cfg in designs.items() if cfg.path == "listed"}
                wanted = LISTED_MIN_COLS <= width <= SPLIT_MIN_COLS and width > k
                names = {"listed.w4", "listed.w8", "listed.w16", "listed.w8.a", "listed.w16.a"}
                got = {re.sub(r"\.a\d+$", ".a", name) for name in listed}
                assert got == (names if wanted else set()), (width, rows, k, sorted(listed))
                for name, cfg in listed.items():
                    assert cfg.block >= width and cfg.candidates >= 1.5 * k
                    assert name.endswith(f".a{cfg.append}") == (cfg.append > LISTED_APPEND)
                    # group maxima only where there are 4 of them per needed key
                    assert cfg.group == 1 or cfg.block // cfg.group >= 4 * k
                assert topk_launch_config(width, k, rows).path != "listed"


def test_topk_coop_dispatch_by_programs():
    # one launch while the call has at most COOP_MAX_PROGRAMS programs of at most
    # COOP_MAX_PARTS a row, at the smallest chunk that fits (once dispatched); two beyond
    for width in (
        COOP_MIN_COLS + 1,
        6000,
        SPLIT_MIN_COLS,
        SPLIT_MIN_COLS + 1,
        16384,
        16385,
        32768,
        40000,
        65536,
        65537,
        131072,
    ):
        for rows in (1, 2, 7, 8, 9, 16, 17, 64, 128):
            fits = [
                c
                for c in COOP_CHUNKS
                if -(-width // c) <= COOP_MAX_PARTS and rows * -(-width // c) <= COOP_MAX_PROGRAMS
            ]
            assert _coop_chunk(width, rows) == (fits[0] if fits else 0), (width, rows)
            cfg = topk_launch_config(width, 512, rows)
            if fits and COOP_DISPATCHED:
                assert (cfg.path, cfg.block) == ("coop", fits[0]), (width, rows, cfg)
            else:  # rows one program each would take, else the split
                want = "split" if width > SPLIT_MIN_COLS else "single"
                assert cfg.path == want, (width, rows, cfg)
    assert topk_launch_config(COOP_MIN_COLS, 512, 1).path == "single"

    def coop_warps(k):  # benchmarks and GPU tests time it, dispatched or not
        configs = topk_tuning_configs(32768, k, 8).values()
        return {c.block: c.num_warps for c in configs if c.path == "coop"}

    assert coop_warps(512) == {2048: 4, 4096: 8}
    assert coop_warps(2048) == {2048: 8, 4096: 8}  # a list of 4096 candidates


def test_topk_narrow_rows_time_the_one_launch_split_where_it_fits():
    # rows one program each takes are timed spread over 2 to COOP_MAX_PARTS programs of each
    # chunk, in one launch, wherever the call's programs all fit
    for width in (1000, 1024, 2048, 3000, COOP_MIN_COLS):
        for rows in (1, 8, 9, 16, 17, 64, 65, 128):
            designs = topk_tuning_configs(width, 512, rows)
            assert designs["dispatched"].path == "single"
            parts = {c: -(-width // c) for c in COOP_CHUNKS}
            want = {
                f"coop.c{c}"
                for c, n in parts.items()
                if 2 <= n <= COOP_MAX_PARTS and rows * n <= COOP_MAX_PROGRAMS
            }
            got = {name for name, cfg in designs.items() if cfg.path == "coop"}
            assert got == want, (width, rows, got)
            for name in got:
                cfg = designs[name]
                assert cfg.block == int(name[len("coop.c") :]) and cfg.candidates >= 512


@pytest.mark.parametrize("k", [512, 2048])
def test_topk_row_thresholds_name_every_change(k):
    # the planner reaches every variant by planning rows 1 and each threshold: between two
    # consecutive thresholds the choice does not change
    for width in (SPLIT_MANY_ROWS_MIN_COLS + 1, SPLIT_MIN_COLS + 1, 12000, 16384, 32768, 65536):
        thresholds = topk_row_thresholds(width, k)
        for rows in range(1, SPLIT_FINISH_APART_MIN_ROWS + 40):
            start = max([1, *(t for t in thresholds if t <= rows)])
            assert topk_launch_config(width, k, rows) == topk_launch_config(width, k, start), (
                width,
                rows,
                start,
            )


def test_topk_coop_row_states_of_a_capture_are_its_own(device, monkeypatch):
    # under a CUDA graph capture each call takes rows of its own (graphs captured on one stream
    # may be replayed on two at once), already set up, from the device's pool (made by the first
    # uncaptured call); a used-up pool gives rows set up anew (inside the graph)
    from kernels import topk as topk_module

    logits = torch.zeros(3, 3000, device=device)
    monkeypatch.setattr(topk_module, "_capture_pools", {})
    monkeypatch.setattr(topk_module, "_row_states_by_stream", {})
    kept = topk_module._row_states(logits, 3)
    pool = topk_module._capture_pools[logits.device]
    monkeypatch.setattr(topk_module, "stream_capturing", lambda device: True)
    captured = [topk_module._row_states(logits, 3) for _ in range(2)]
    assert captured[0].data_ptr() != kept.data_ptr()
    assert captured[1].data_ptr() == captured[0].data_ptr() + 3 * captured[0].stride(0) * 4
    assert all(c.data_ptr() >= pool[0].data_ptr() for c in captured)  # views of the pool
    assert _coop_states_restored(captured[0].cpu())
    pool[1] = pool[0].shape[0] - 2  # used up: set up anew
    fresh = topk_module._row_states(logits, 3)
    assert fresh.untyped_storage().data_ptr() != pool[0].untyped_storage().data_ptr()
    assert _coop_states_restored(fresh.cpu())
    monkeypatch.setattr(topk_module, "stream_capturing", lambda device: False)
    assert topk_module._row_states(logits, 3) is kept


def test_topk_coop_row_states_per_stream_and_grown(device):
    # the row states are kept between calls (they come back restored) and grow for a call of
    # more rows than they hold, the outgrown ones kept alive (a captured graph may use them)
    from kernels import topk as topk_module

    gen = torch.Generator().manual_seed(3)
    width, k = 3000, 40
    cfg = TopkConfig("coop", 1024, 4, 1024, candidates=256)
    states_seen = []
    for rows in (3, 3, COOP_MAX_PROGRAMS + 5):
        logits = torch.randn(rows, width, generator=gen)
        lengths = torch.full((rows,), width, dtype=torch.int32)
        out = torch.full((rows, k), INT_POISON, dtype=torch.int32, device=device)
        launches = ragged_topk_launches(logits.to(device), lengths.to(device), k, out, cfg)
        for launch in launches:
            launch.run()
        assert_topk_matches(out, logits, lengths, k)
        states_seen.append(launches[0].args[2])
    assert states_seen[0] is states_seen[1]
    assert states_seen[2].shape[0] >= COOP_MAX_PROGRAMS + 5
    assert any(s is states_seen[0] for s in topk_module._outgrown_row_states)
    assert _coop_states_restored(states_seen[2].cpu())
