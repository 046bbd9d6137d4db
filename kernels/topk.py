"""Ragged top-k in Triton: for each row, the column indices of the k largest of its first
``lengths[r]`` values (any order); rows with ``lengths[r] <= k`` get ``0..lengths[r]-1`` then -1.

Keys: each float32 maps to an integer key with the same order. One program per row (rows up to
``SPLIT_MIN_COLS`` wide, and up to ``SPLIT_MANY_ROWS_MIN_COLS`` in calls of many rows): find the
k-th largest key (up to 32 bisection counts: it stops once exactly k keys are at or above its
low end), then write every column whose key is above it plus the lowest-indexed columns equal
to it, compacted with a prefix sum; rows up to
``SINGLE_PASS_MAX_COLS`` stay in registers (``single``), wider ones stream (``streaming``).
Wider rows take the ``split`` path (two or three launches, described above
``_split_bound_kernel``): many programs per row bound the k-th largest key from below and
gather the few columns above the bound; the last of a row's programs then selects among those
candidates, or, for calls of many rows, a third launch of one program per row does. The
``coop`` path takes the same steps in one launch, a row's programs meeting at a barrier
(described above ``_coop_topk_kernel``), for calls of few such rows, or of few rows wider than
``COOP_MIN_COLS`` (``COOP_DISPATCHED``). The ``listed`` path (a timed design, not dispatched;
described above ``_listed_topk_kernel``) takes the split path's steps in one program per row.

Specialization contract: ``num_cols``, ``k`` and the output row stride are runtime values
(``do_not_specialize``); ``lengths`` and ``out`` may be unaligned views (e.g. a prefill chunk's
slice) and are excluded from alignment specialization. The logits row stride and pointer are
specialized; the select paths always pass 16-byte-aligned logits whose row stride is a
multiple of 64 or the fixed decode width. Widths are bucketed by :func:`topk_launch_config`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ._checks import check_int, check_same_device, check_shape, check_tensor
from ._fast_launch import remember_prepared
from ._launch import (
    KernelLaunch,
    TensorMeta,
    call_key,
    cdiv,
    current_stream_handle,
    device_arch,
    interpreting,
    next_power_of_2,
    stream_capturing,
)

__all__ = [
    "TopkConfig",
    "topk_launch_config",
    "ragged_topk_launch",
    "ragged_topk_launches",
    "ragged_topk",
    "SINGLE_PASS_MAX_COLS",
    "SPLIT_MIN_COLS",
    "SPLIT_FINISH_APART_MIN_ROWS",
    "SPLIT_MANY_ROWS_MIN_COLS",
    "COOP_MAX_PROGRAMS",
    "COOP_MAX_PARTS",
    "topk_row_thresholds",
    "topk_tuning_configs",
]

_log = logging.getLogger(__name__)

SINGLE_PASS_MAX_COLS = 32768
_MIN_BLOCK = 1024
_STREAM_BLOCK = 8192
_OUT_BLOCK = 1024
# split path (tools/bench_kernels.py --sweep)
SPLIT_MIN_COLS = 8192  # narrower rows: one program each, unless many (SPLIT_MANY_ROWS_MIN_COLS)
SPLIT_CHUNK = 4096
SPLIT_WARPS = 8
SPLIT_CANDIDATES = 2048  # the smallest candidate list; larger k get up to SPLIT_MAX_CANDIDATES
SPLIT_MAX_CANDIDATES = 8192
SPLIT_MAX_GROUP = 8
SPLIT_GROUPS_PER_KEY = (
    4  # group maxima per key a chunk's bound needs, or the bound searches every key
)
# From this many rows on, rows are finished by a third launch (one program per row) instead of
# by the last collect program of each row: the finishing search needs ~4x the registers of the
# scan, which caps the collect launch's occupancy once it runs in many waves. H200, 32K columns,
# k = 512, CUDA graphs (tools/bench_topk_rows.py): 64 rows 34.5 vs 32.8 us fused (and a third
# launch's host cost when eager), 256 rows 81 vs 85, 4096 rows 1045 vs 1195 us; 4 finishing
# warps beat 2 and 8 at every row count.
SPLIT_FINISH_APART_MIN_ROWS = 256
SPLIT_FINISH_WARPS = 4
# Chunk bounds within a quarter of their share (_bound_slack; 0: exact). H100, k = 512 and
# 2048, CUDA graphs, normal / relu-summed / uniform logits, every result exact, against exact
# bounds (benchmarks/kernel_work/bound_slack/): 8 x 32K 20.1 / 17.9 / 18.3 -> 18.2 / 17.6 /
# 17.3 us, 64 x 32K 31.8 / 30.1 / 29.9 -> 30.6 / 29.6 / 28.5, 256 x 8K 37.3 / 37.0 / 35.8 ->
# 34.8 / 35.0 / 33.3, 4096 x 32K 631 / 595 / 602 -> 606 / 590 / 590; no shape slower.
# Capping the search at 12 halvings instead won on normal logits only (the relu-summed rows'
# searches end before 12), and 10 or 8 overflowed the lists of 64 x 128K (k = 2048).
BOUND_SLACK = 4
# From this compute capability on (Hopper's griddepcontrol), the split path's collect launch is a
# programmatic dependent launch of the bound launch (TopkConfig.dependent_launch): it starts
# while the bound launch runs and (where its programs finish rows) loads its chunk before it
# waits for the bounds. H200, k = 512
# unless said, CUDA graphs, relu-summed / normal logits, every result exact, against the same
# launches in order (benchmarks/kernel_work/split_designs/): 64 x 32K 27.4 / 29.2 -> 26.7 /
# 28.2 us, 256 x 8K 35.6 / 35.6 -> 33.3 / 33.2, 1024 x 32K 172.2 / 181.9 -> 169.5 / 179.9,
# 64 x 128K (k = 2048, finished apart) 64.8 / 70.6 -> 62.2 / 67.6.
DEPENDENT_LAUNCH_MIN_ARCH = 90
# Rows finished apart scan in chunks of 2048 with 4-warp bound programs: twice the programs of
# 4096-column chunks at 8 warps, each with half the bound search's work, so more of them stay
# resident while the scan runs in several waves. H100, 32K columns, k = 512, CUDA graphs
# (tools/bench_topk_rows.py): 256 rows 78.2 vs 82.3 us, 512 rows 139 vs 148, 1024 rows 258 vs
# 277, 2048 rows 487 vs 533, 4096 rows 958 vs 1052; at 64 rows (fused) it loses, 39 vs 35.
SPLIT_APART_CHUNK = 2048
SPLIT_APART_WARPS = 4
# The collect launch's warps. Rows finished apart: 2 (the scan is a chain of dependent steps per
# program; more programs resident hide it better); H100, CUDA graphs, k = 512, 2 vs 8 warps
# (benchmarks/kernel_work/9429278/): 4096 x 32K 799 vs 906 us, 1024 x 32K 219 vs 246, 4096 x
# 8K 363 vs 390, 2048 x 4160 143 vs 153. Rows finished by the last collect program: 8, or one
# per 512 listed candidates for lists over 4096 (16 warps for 4096 candidates lost: 64 x 128K,
# k = 2048, 92 vs 130 us; 16 x 64K 33 vs 39; at k = 512, 64 x 32K, 4 warps 36.4 vs 34.9;
# 8192-candidate lists, k > 2730, not measured).
# The collect programs of rows finished apart read the row's bound before they load their chunk
# (TopkConfig.collect_preload off), holding nothing of it across those reads: 96 registers a
# 2-warp program against 162 when it loads first (ptxas, sm_90a;
# test_topk_launches_hold_their_registers_for_sm90). H100, CUDA graphs, uniform logits, k = 512
# unless said, dependent launches both (benchmarks/kernel_work/collect_late/): 4096 x 32K 584
# vs 654 us, 1024 x 32K 170 vs 184, 256 x 32K 56.2 vs 57.9, 4096 x 8K 265 vs 282, 1024 x 8K
# 79.9 vs 82.5, 256 x 8K 32.3 vs 32.0, 256 x 128K (k = 2048) 181 vs 194, 64 x 128K (k = 2048)
# 64.3 vs 64.7. Rows finished by their last collect program load first (64 x 32K 27.8 vs 28.5).
SPLIT_APART_COLLECT_WARPS = 2
# Lists of this many candidates or more (k >= 1366) are finished apart at every row count, by
# one warp per 512 candidates, the collect launch keeping the two-launch path's chunk and warps:
# the finishing search of a 4096-key list spills (128 registers) when the collect program runs
# it. H100, CUDA graphs, k = 2048 (benchmarks/kernel_work/de5cea8/, f0c2a14/): 64 x 128K 67.0
# us against 76.8 fused, 128 x 128K 108 against 136, 64 x 64K 46.1 against 49.9, 32 x 64K 36.0
# against 36.9; 16 x 64K loses 1.0 us (31.1 against 30.1); 4 finishing warps 78.1 at 64 x 128K.
SPLIT_APART_MIN_CANDIDATES = 4096
# From SPLIT_FINISH_APART_MIN_ROWS rows on, rows wider than SPLIT_MANY_ROWS_MIN_COLS (up to
# SPLIT_MIN_COLS) are split too, finished apart: one program per row then runs its (up to)
# 32-step search in several waves, while the split path's bound, scan and finish each fill the GPU.
# H100, k = 512, CUDA graphs, split vs one program per row (benchmarks/kernel_work/4217df6/
# topk8k.txt, f2031f0/topk_thresh.txt): 8192 columns 256 rows 44.4 vs 46.1 us, 512 rows 71.0 vs
# 86.0, 1024 rows 126.2 vs 164.9, 4096 rows 444 vs 621; 4160 columns 256 rows 37.4 vs 43.9,
# 1024 rows 98.5 vs 160.6; at 64 rows and fewer one program per row wins (24.5 vs 27.8 at 8K).
SPLIT_MANY_ROWS_MIN_COLS = 4096
# Few rows of a split width can take one launch (``coop``, _coop_topk_kernel): a row's programs
# meet at a barrier in that launch instead of in a second one, and keep their chunk in registers
# between the bound and the collect. It waits on programs of the same launch, so it is meant only
# for calls whose programs can all be resident at once (at most COOP_MAX_PROGRAMS programs a
# call) and whose rows have few programs (COOP_MAX_PARTS: a row completes on any GPU that holds
# that many programs at once, a 16-SM MIG slice included, since programs start in launch
# order). Its prototype on an H200, CUDA graphs, k = 512 unless said, vs the dispatched split
# (benchmarks/kernel_work/coop/): 1 x 16K 14.9 vs 20.0 us, 8 x 16K 18.0 vs 21.3, 16 x 16K
# 18.8 vs 22.5, 1 x 32K 18.2 vs 21.9, 8 x 32K 18.4 vs 21.2, 16 x 32K 21.2 vs 23.2, 8 x 64K
# 22.1 vs 23.6, 8 x 64K k = 2048 25.6 vs 30.1; with more programs it loses (64 x 32K 41.9
# vs 33.0: its finishing code holds ~130-170 registers, so programs wait for a second wave
# while others spin).
# On an H100 (benchmarks/kernel_work/60bb401/) every coop design passed the GPU tests, with
# graphs captured on one stream replayed on two at once and calls on two streams interleaved;
# eagerly, 8 x 32K 19.8 vs 23.7 us, 1 x 16K 17.1 vs 21.2, 8 x 64K 20.3 vs 23.5. With its
# registers capped so that 64 x 32K's programs are all resident it still lost (35.1 vs 33.0).
# Rows wider than COOP_MIN_COLS and up to SPLIT_MIN_COLS, which one program each would take,
# take it too where the call's programs fit, at chunks from 512: H100, k = 512, CUDA graphs,
# uniform logits, one program a row vs coop at the smallest chunk that fits
# (benchmarks/kernel_work/coop_narrow/): 1 x 8K 19.6 vs 14.7 us (c512), 8 x 8K 21.0 vs 16.7
# (c512), 16 x 8K 21.0 vs 17.0 (c1024), 32 x 8K 22.2 vs 19.6 (c2048), 64 x 8K 22.2 vs 20.4
# (c4096). At 4096 columns it ties or loses (1 x 4K 15.7 vs 15.5, 8 x 4K 15.7 vs 16.2-16.7,
# 32 x 4K 17.2 vs 17.4), at 2048 it loses (1 x 2K 10.9 vs 14.5).
# Off, every call takes the split path (the planner then omits the coop variants).
COOP_DISPATCHED = True
COOP_MIN_COLS = 4096
COOP_MAX_PROGRAMS = 128
COOP_MAX_PARTS = 16
COOP_CHUNKS = (512, 1024, 2048, 4096)  # the smallest whose programs fit is used
# One program a row can also take the split path's steps alone (``listed``, _listed_topk_kernel):
# bound the k-th largest key over group maxima, list the columns at or above the bound, and
# finish from the list, instead of bisecting all of the row's keys. A timed design where one
# program a row or the split path takes rows of LISTED_MIN_COLS to SPLIT_MIN_COLS columns;
# not dispatched until measured.
LISTED_MIN_COLS = 2048
LISTED_APPEND = 1024  # keys a pass lists: the row is read again (from L1) in blocks of these
_COOP_STATE_INTS = 4  # per row: bound (atomic min), bounds arrived, candidates, rows collected
_CANDIDATE_LISTS = 2  # a row's list slots, in lists of CANDIDATES: the list and its reserve


@dataclass(frozen=True)
class TopkConfig:
    # "single", "streaming" (one program per row), "split" (a row over many programs, two or
    # three launches), "coop" (a row over many programs that meet within one launch) or
    # "listed" (one program per row, taking the split path's steps alone)
    path: str
    block: int
    num_warps: int
    out_block: int
    # split path: the per-row candidate list (the finishing program's block) and the warps of
    # the collect launch (whose last program per row finishes the row from the list)
    candidates: int = 0
    collect_warps: int = 0
    # split path: keys per group whose maximum stands in for the group in the bound search
    # (1: every key); see _split_bound_kernel
    group: int = 1
    # split path: rows finished by a third launch with this many warps (0: by the collect launch)
    finish_warps: int = 0
    # split and coop paths: a chunk's bound search may stop once at most share + share //
    # bound_slack keys (group maxima) lie at or above it (0: exactly share); see _bound_slack
    bound_slack: int = 0
    # split path: the collect launch is a programmatic dependent launch of the bound launch
    # (Hopper on): it starts while the bound launch runs and waits for the bounds, loading its
    # chunk first where collect_preload (the interpreter runs it as an ordinary launch)
    dependent_launch: bool = False
    # split path: each collect program loads its chunk before it reads the row's bound (the
    # load then overlaps the wait for the bound launch) instead of after, holding the chunk's
    # keys and columns across those reads (see SPLIT_APART_COLLECT_WARPS)
    collect_preload: bool = True
    # listed path: keys listed a pass (the row is read again in blocks of this many)
    append: int = 0


def topk_launch_config(
    num_cols: int, k: int, num_rows: int = 1, arch: int | None = None
) -> TopkConfig:
    """Every launch decision of the ragged top-k (called by the launcher and the planner).

    Rows wider than ``SPLIT_MIN_COLS`` (or than ``SPLIT_MANY_ROWS_MIN_COLS`` in calls of
    ``SPLIT_FINISH_APART_MIN_ROWS`` rows) are spread over many programs, with a candidate list
    sized from k (about 1.2 k candidates gather for well-mixed rows, so the list holds 1.5 k, at
    least ``SPLIT_CANDIDATES``): in one launch (``coop``, once ``COOP_DISPATCHED``) while the
    call has at most ``COOP_MAX_PROGRAMS`` programs of at most ``COOP_MAX_PARTS`` a row (also
    for rows from ``COOP_MIN_COLS`` wide, which would otherwise take one program each), else
    in two launches
    (``split``: a fixed chunk whatever the width), or three from ``SPLIT_FINISH_APART_MIN_ROWS``
    rows on, where rows of up to ``SPLIT_MIN_COLS`` are split too, and for lists of
    ``SPLIT_APART_MIN_CANDIDATES`` candidates at every row count. Narrower rows take one
    program each, widths bucketed to powers of two. :func:`topk_row_thresholds` names the row
    counts that matter. A deployment (one k) reaches a small, known set of variants whatever
    its per-step sizes are. ``arch`` is the GPU's compute capability (None: an sm_90-class
    GPU): from ``DEPENDENT_LAUNCH_MIN_ARCH`` on, the split path's collect launch is a
    programmatic dependent launch."""
    dependent = arch is None or arch >= DEPENDENT_LAUNCH_MIN_ARCH
    return _launch_config(num_cols, k, num_rows, dependent)


def topk_row_thresholds(num_cols: int, k: int) -> tuple[int, ...]:
    """Every row count at which :func:`topk_launch_config`'s choice for this width and k can
    change (the planner's row classes: rows 1 and each of these reach every variant)."""
    rows = {SPLIT_FINISH_APART_MIN_ROWS}
    if COOP_DISPATCHED and num_cols > COOP_MIN_COLS:
        rows.update(COOP_MAX_PROGRAMS // parts + 1 for _, parts in _coop_parts(num_cols))
    return tuple(sorted(rows))


def topk_tuning_configs(num_cols: int, k: int, num_rows: int) -> dict[str, TopkConfig]:
    """Every design the benchmarks time for one shape, by name: the dispatched config first,
    then the alternatives a tuning run weighs against it (one program per row where the width
    allows it, where rows finish, the finishing warps, the launches in order or as dependents,
    the collect launch's warps, the chunk, the warps). The GPU tests run each of them, rerun
    and replayed."""
    dispatched = topk_launch_config(num_cols, k, num_rows)
    configs = {"dispatched": dispatched}
    if dispatched.path == "single":
        for warps in (2, 4, 8, 16):
            cfg = replace(dispatched, num_warps=warps)
            if cfg != dispatched:
                configs[f"single.w{warps}"] = cfg
    if dispatched.path == "single":  # one launch of a row's programs, where they all fit
        for chunk in _narrow_coop_chunks(num_cols, num_rows):
            configs[f"coop.c{chunk}"] = _coop_config(k, chunk)
    if LISTED_MIN_COLS <= num_cols <= SPLIT_MIN_COLS and num_cols > k:
        for warps in (4, 8, 16):  # one program a row, the split path's steps alone
            configs[f"listed.w{warps}"] = _listed_config(num_cols, k, warps)
        for warps in (8, 16):  # listing the row in half the passes
            cfg = _listed_config(num_cols, k, warps, append=2 * LISTED_APPEND)
            configs[f"listed.w{warps}.a{cfg.append}"] = cfg
    if dispatched.path not in ("split", "coop"):
        return configs
    if num_cols <= SPLIT_MIN_COLS:  # split for its row count: one program per row beside it
        configs["single"] = _per_row_config(num_cols)
    for chunk, _ in _coop_parts(num_cols):  # one launch, at every chunk that fits
        cfg = _coop_config(k, chunk)
        if cfg != dispatched:
            configs[f"coop.c{chunk}"] = cfg
    # the split designs launch as the dispatched split would on an sm_90-class GPU
    fused = replace(_fused_config(k), dependent_launch=True)
    if fused != dispatched:
        configs["fused"] = fused
    for warps in (2, 4, 8):
        cfg = _finished_apart(fused, warps, collect_warps=fused.num_warps)
        if cfg != dispatched:
            configs[f"apart.w{warps}"] = cfg
    if dispatched.bound_slack:
        configs["bound.exact"] = replace(dispatched, bound_slack=0)
    if dispatched.path == "split":  # dispatched as on an sm_90-class GPU: dependent launches
        configs["launch.after"] = replace(dispatched, dependent_launch=False)
    split = dispatched if dispatched.path == "split" else fused
    # where the collect programs load their chunk: before the row's bound or after it
    late = "collect.late" if split.collect_preload else "collect.preload"
    configs[late] = replace(split, collect_preload=not split.collect_preload)
    for warps in (2, 4, 16):  # the collect launch's warps (it holds the row's list when fused)
        cfg = replace(split, collect_warps=warps)
        if cfg != split:
            configs[f"collect.w{warps}"] = cfg
    for chunk in (split.block, 8192, 2048, 1024):
        for warps in (split.num_warps, 4):
            cfg = replace(split, block=chunk, num_warps=warps)
            if cfg not in configs.values():
                configs[f"c{chunk}.w{warps}"] = cfg
    return configs


@functools.lru_cache(maxsize=1024)  # pure and called on every launch: keep it off the host path
def _launch_config(num_cols: int, k: int, num_rows: int, dependent: bool) -> TopkConfig:
    many_rows = num_rows >= SPLIT_FINISH_APART_MIN_ROWS
    if COOP_DISPATCHED and num_cols > COOP_MIN_COLS:
        chunk = _coop_chunk(num_cols, num_rows)
        if chunk:
            return _coop_config(k, chunk)
    if num_cols > SPLIT_MIN_COLS or (many_rows and num_cols > SPLIT_MANY_ROWS_MIN_COLS):
        return replace(_split_config(k, many_rows), dependent_launch=dependent)
    return _per_row_config(num_cols)


def _coop_parts(num_cols: int) -> list[tuple[int, int]]:
    """(chunk, programs a row) for each of COOP_CHUNKS, smallest first, that keeps a row's
    programs within COOP_MAX_PARTS."""
    parts = [(chunk, cdiv(num_cols, chunk)) for chunk in COOP_CHUNKS]
    return [(chunk, n) for chunk, n in parts if n <= COOP_MAX_PARTS]


def _coop_fits(num_cols: int, num_rows: int) -> list[tuple[int, int]]:
    """(chunk, programs a row) of :func:`_coop_parts` whose call's programs all fit
    (at most COOP_MAX_PROGRAMS)."""
    return [
        (c, parts) for c, parts in _coop_parts(num_cols) if num_rows * parts <= COOP_MAX_PROGRAMS
    ]


def _narrow_coop_chunks(num_cols: int, num_rows: int) -> list[int]:
    """The chunks at which rows one program each takes would be spread over 2 or more programs
    that all fit (timed designs)."""
    return [c for c, parts in _coop_fits(num_cols, num_rows) if parts >= 2]


def _coop_chunk(num_cols: int, num_rows: int) -> int:
    """The smallest of COOP_CHUNKS whose programs fit (0: none does)."""
    return next((c for c, _ in _coop_fits(num_cols, num_rows)), 0)


def _coop_config(k: int, chunk: int) -> TopkConfig:
    # the finishing program holds the candidate list: 4 warps for up to 2048 candidates (8 for
    # 4096-key chunks); more warps lost at 1024 and 2048 columns (8 x 32K 18.6 vs 18.4 us)
    fused = _fused_config(k)
    warps = max(4, fused.candidates // 512, chunk // 512)
    return TopkConfig(
        "coop",
        chunk,
        warps,
        _OUT_BLOCK,
        candidates=fused.candidates,
        group=fused.group,
        bound_slack=fused.bound_slack,
    )


def _listed_config(
    num_cols: int, k: int, num_warps: int, append: int = LISTED_APPEND
) -> TopkConfig:
    # the bound's search runs over SPLIT_GROUPS_PER_KEY group maxima per needed key where the
    # row is wide enough (the largest group, up to SPLIT_MAX_GROUP, leaving that many), else
    # over every key
    block = max(_MIN_BLOCK, next_power_of_2(num_cols))
    group = _group_leaving(block, SPLIT_GROUPS_PER_KEY * k)
    candidates = _split_candidates(k)
    return TopkConfig(
        "listed",
        block,
        num_warps,
        _OUT_BLOCK,
        candidates=candidates,
        group=group,
        bound_slack=_bound_slack(k, candidates),
        append=min(append, block),
    )


def _split_config(k: int, many_rows: bool) -> TopkConfig:
    if many_rows:  # the collect launch only scans; the finishing block sizes its own warps
        candidates = _split_candidates(k)
        scan = TopkConfig(
            "split",
            SPLIT_APART_CHUNK,
            SPLIT_APART_WARPS,
            _OUT_BLOCK,
            candidates=candidates,
            collect_warps=SPLIT_APART_COLLECT_WARPS,
            group=_split_group(k),
            bound_slack=_bound_slack(k, candidates),
        )
        return _finished_apart(scan, max(SPLIT_FINISH_WARPS, candidates // 512))
    fused = _fused_config(k)
    if fused.candidates >= SPLIT_APART_MIN_CANDIDATES:
        return _finished_apart(fused, fused.candidates // 512)
    return fused


def _finished_apart(cfg: TopkConfig, finish_warps: int, **changes) -> TopkConfig:
    """``cfg`` with its rows finished by a third launch of ``finish_warps`` warps: its collect
    programs only scan, reading the row's bound before they load their chunk (see
    SPLIT_APART_COLLECT_WARPS)."""
    return replace(cfg, finish_warps=finish_warps, collect_preload=False, **changes)


def _fused_config(k: int) -> TopkConfig:
    """Two launches, the last collect program of each row finishing it."""
    candidates = _split_candidates(k)
    return TopkConfig(
        "split",
        SPLIT_CHUNK,
        SPLIT_WARPS,
        _OUT_BLOCK,
        candidates=candidates,
        collect_warps=max(SPLIT_WARPS, candidates // 512),
        group=_split_group(k),
        bound_slack=_bound_slack(k, candidates),
    )


def _bound_slack(k: int, candidates: int) -> int:
    """A chunk bound up to a quarter of its share looser, where the candidate list holds at
    least 3 k: the bound search stops once at most share + share // 4 keys (group maxima) lie at
    or above it, saving dependent steps (well-mixed rows: 10-15 of 16 halvings to find exactly
    share, 5-11 to come within a quarter of it) for about 15% more candidates. Where the list
    holds less (k > 682), its headroom is kept for the exact bounds' spread: with 1.5 k slots,
    rows of 32K at k = 1365 overflowed the list 1 in 100 times with exact bounds (emulated on
    the CPU) and 1 in 3 times with the slack (benchmarks/kernel_work/bound_slack/)."""
    return BOUND_SLACK if candidates >= 3 * k else 0


def _split_candidates(k: int) -> int:
    return min(SPLIT_MAX_CANDIDATES, max(SPLIT_CANDIDATES, next_power_of_2(k + k // 2)))


def _split_group(k: int) -> int:
    # group maxima: SPLIT_GROUPS_PER_KEY per key a full chunk must hold at or above its
    # bound, for a row of 8 full chunks (a 32K row); rows with a larger share search every
    # key.
    return _group_leaving(SPLIT_CHUNK, SPLIT_GROUPS_PER_KEY * cdiv(k, 8))


def _group_leaving(keys: int, groups_wanted: int) -> int:
    """The largest power of two, up to SPLIT_MAX_GROUP, that groups ``keys`` keys into at least
    ``groups_wanted`` groups (1 where none does)."""
    return max(1, min(SPLIT_MAX_GROUP, next_power_of_2(keys // groups_wanted + 1) // 2))


def _per_row_config(num_cols: int) -> TopkConfig:
    if num_cols > SINGLE_PASS_MAX_COLS:
        return TopkConfig("streaming", _STREAM_BLOCK, 16, _OUT_BLOCK)
    block = max(_MIN_BLOCK, next_power_of_2(max(num_cols, 1)))
    return TopkConfig("single", block, max(4, min(32, block // 1024)), _OUT_BLOCK)


@triton.jit
def _order_keys(values):
    # int32 keys whose signed order equals the float order (negatives: flip magnitude bits).
    bits = values.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _load_keys(row_ptr, cols, n):
    return _order_keys(tl.load(row_ptr + cols, mask=cols < n, other=0.0))


# Where the streamed searches below read their items: keys held in registers (one block), the
# row (columns 0..n-1), or a candidate list (columns listed, keys read from the row or listed
# beside them); the items are the row's keys or the list's entries.
_IN_REGISTERS = tl.constexpr(0)
_ROW = tl.constexpr(1)
_LIST = tl.constexpr(2)
_LIST_KEYS = tl.constexpr(3)


@triton.jit
def _items_block(
    row_ptr,
    list_ptr,
    list_keys_ptr,
    keys,
    start,
    n,
    items,
    BLOCK: tl.constexpr,
    SOURCE: tl.constexpr,
):
    """(columns, valid, keys) of the block of items from ``start`` (of ``items``), by SOURCE."""
    at = start + tl.arange(0, BLOCK)
    valid = at < items
    if SOURCE == _IN_REGISTERS:
        cols = at
        block = keys
    elif SOURCE == _ROW:
        cols = at
        block = _load_keys(row_ptr, cols, n)
    else:  # written by other programs of a launch: read through L2
        cols = tl.load(list_ptr + at, mask=valid, other=0, cache_modifier=".cg")
        if SOURCE == _LIST_KEYS:
            block = tl.load(list_keys_ptr + at, mask=valid, other=0, cache_modifier=".cg")
        else:
            block = _load_keys(row_ptr, cols, n)
    return cols, valid, block


@triton.jit
def _count_at_least(
    row_ptr,
    list_ptr,
    list_keys_ptr,
    keys,
    n,
    items,
    threshold,
    BLOCK: tl.constexpr,
    SOURCE: tl.constexpr,
):
    if SOURCE == _IN_REGISTERS:
        _, valid, block = _items_block(
            row_ptr, list_ptr, list_keys_ptr, keys, 0, n, items, BLOCK, SOURCE
        )
        count = tl.sum((valid & (block >= threshold)).to(tl.int32), axis=0)
    else:
        count = 0
        for start in range(0, items, BLOCK):
            _, valid, block = _items_block(
                row_ptr, list_ptr, list_keys_ptr, keys, start, n, items, BLOCK, SOURCE
            )
            count += tl.sum((valid & (block >= threshold)).to(tl.int32), axis=0)
    return count


@triton.jit
def _kth_largest_bisect(
    row_ptr, list_ptr, list_keys_ptr, keys, n, items, k, BLOCK: tl.constexpr, SOURCE: tl.constexpr
):
    """(threshold key, ties to take) for ``items`` > k keys (read as SOURCE says): halvings of
    the key range until exactly k keys lie at or above its low end (well-mixed rows: about half
    of the 32 halvings a one-key range needs), or the range is one key (ties at the
    threshold)."""
    # invariant: at_lo = count(key >= lo) >= k > at_hi = count(key >= hi)
    lo = tl.full((), -2147483648, tl.int64)
    hi = tl.full((), 2147483648, tl.int64)
    at_lo = items
    at_hi = tl.full((), 0, tl.int32)
    while (hi - lo > 1) & (at_lo != k):
        mid = (lo + hi) >> 1
        count = _count_at_least(
            row_ptr, list_ptr, list_keys_ptr, keys, n, items, mid.to(tl.int32), BLOCK, SOURCE
        )
        enough = count >= k
        lo = tl.where(enough, mid, lo)
        at_lo = tl.where(enough, count, at_lo)
        hi = tl.where(enough, hi, mid)
        at_hi = tl.where(enough, at_hi, count)
    # exactly k keys >= lo: all of them, as the keys above lo - 1 (lo rose above the minimum)
    exact = at_lo == k
    return tl.where(exact, lo - 1, lo).to(tl.int32), tl.where(exact, 0, k - at_hi)


@triton.jit
def _write_short_row(out_row_ptr, n, k, BLOCK: tl.constexpr):
    """A row no longer than k: 0..n-1, then -1 up to k."""
    for start in range(0, k, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        tl.store(out_row_ptr + idx, tl.where(idx < n, idx, -1), mask=idx < k)


@triton.jit
def _write_selected(
    row_ptr,
    list_ptr,
    list_keys_ptr,
    out_row_ptr,
    keys,
    n,
    items,
    threshold,
    ties_needed,
    BLOCK: tl.constexpr,
    SOURCE: tl.constexpr,
):
    """Write the columns of the items (read as SOURCE says) above ``threshold`` and the first
    ``ties_needed`` equal to it (in item order), compacted."""
    written = 0
    ties_seen = 0
    for start in range(0, items, BLOCK):
        cols, valid, block = _items_block(
            row_ptr, list_ptr, list_keys_ptr, keys, start, n, items, BLOCK, SOURCE
        )
        above = valid & (block > threshold)
        tie = valid & (block == threshold)
        tie_rank = tl.cumsum(tie.to(tl.int32), axis=0) + ties_seen
        take = above | (tie & (tie_rank <= ties_needed))
        position = tl.cumsum(take.to(tl.int32), axis=0) - 1 + written
        tl.store(out_row_ptr + position, cols, mask=take)
        written += tl.sum(take.to(tl.int32), axis=0)
        ties_seen += tl.sum(tie.to(tl.int32), axis=0)


@triton.jit(
    do_not_specialize=["stride_out_row", "num_cols", "k"],
    do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"],
)
def _ragged_topk_kernel(
    logits_ptr,
    lengths_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    OUT_BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    offsets = tl.arange(0, BLOCK)
    if n <= k:
        _write_short_row(out_row_ptr, n, k, OUT_BLOCK)
    elif SINGLE:
        keys = _load_keys(row_ptr, offsets, n)
        _select_from(row_ptr, row_ptr, row_ptr, out_row_ptr, keys, n, n, k, BLOCK, _IN_REGISTERS)
    else:  # the row reloaded in every pass
        _select_from(row_ptr, row_ptr, row_ptr, out_row_ptr, offsets, n, n, k, BLOCK, _ROW)


@triton.jit
def _select_from(
    row_ptr,
    list_ptr,
    list_keys_ptr,
    out_row_ptr,
    keys,
    n,
    items,
    k,
    BLOCK: tl.constexpr,
    SOURCE: tl.constexpr,
):
    """Write the columns of the k largest of ``items`` keys (read as SOURCE says)."""
    threshold, ties_needed = _kth_largest_bisect(
        row_ptr, list_ptr, list_keys_ptr, keys, n, items, k, BLOCK, SOURCE
    )
    _write_selected(
        row_ptr,
        list_ptr,
        list_keys_ptr,
        out_row_ptr,
        keys,
        n,
        items,
        threshold,
        ties_needed,
        BLOCK,
        SOURCE,
    )


# -- split path: one row spread over many programs ------------------------------------------
# Two launches, so all SMs work on a few long rows:
#   bound:   each program holding a full chunk of a row finds a key b with at least
#            j = ceil(k / full chunks) of its chunk's keys >= b (up to 16 bisection steps over
#            the chunk's key range, in registers; over the maxima of groups of GROUP keys when
#            there are SPLIT_GROUPS_PER_KEY groups per needed key: the search is ALU-bound at
#            prefill sizes; stopping once at most j + j // SLACK lie at or above b, where the
#            candidate list has room for the looser bounds: BOUND_SLACK).
#            The smallest b of a row's chunks is a lower bound of the row's k-th largest key:
#            those chunks alone hold >= k keys at or above it.
#   collect: each program compacts the columns of its chunk whose key is >= the row's bound and
#            appends them to the row's candidate list (one atomic per program reserves the
#            slots); for well-mixed rows that is about 1.2-2 k columns. The row's last program
#            to append (a per-row arrival counter) then selects the k largest candidates exactly
#            (a five-way search over the candidates' keys in registers: a latency-bound chain
#            of reductions, so fewer and wider steps) and writes the row. A row whose
#            candidates overflow the list but fit its reserve (_LIST_RESERVE) is finished by
#            streaming the list; one whose candidates overflow the reserve too (thousands of
#            values tied at the bound, or one chunk holding far more than its share of the
#            row's top keys) by streaming the row: slower, still exact.
# Keys are the int32 order keys of _order_keys (32-bit compares in every pass); bisection
# bounds are int64 scalars. No launch reads ``out``; output order is free; ties at the
# threshold are taken in no particular order. The workspace needs no initialization: the
# bound launch zeroes the counters.
_BOUND_STEPS = tl.constexpr(16)
_KEY_MIN = tl.constexpr(-2147483648)  # no bound: every key is at or above it
_KEY_MAX = tl.constexpr(2147483647)
_GROUPS_PER_KEY = tl.constexpr(SPLIT_GROUPS_PER_KEY)
_COOP_STATE = tl.constexpr(_COOP_STATE_INTS)
_APPEND_ROW = tl.constexpr(16)  # keys a row of a chunk in _append_candidates
# A row's candidate list has CANDIDATES slots (the finishing search holds that many keys in
# registers) and as many again in reserve: a row whose candidates overflow the list but fit
# the reserve is finished by a search that streams the list (about twice the passes of the
# list search, each of two blocks read through L2), not the row (its length over CANDIDATES
# blocks a pass). Rows of 128K columns overflowed their 4096-candidate lists from k = 2200 on
# (1 in 5 rows at k = 2730, emulated on the CPU: benchmarks/kernel_work/list_reserve/).
_LIST_RESERVE = tl.constexpr(_CANDIDATE_LISTS)


@triton.jit
def _row_list(lists_ptr, row, CANDIDATES: tl.constexpr):
    """Where a row's candidate list (and its reserve) starts."""
    return lists_ptr + row.to(tl.int64) * (CANDIDATES * _LIST_RESERVE)


@triton.jit
def _keys_per_full_chunk(n, k, CHUNK: tl.constexpr):
    """(chunks of the row that are full, keys each must hold at or above its bound); a row
    without a usable bound gets (0, 0)."""
    full = n // CHUNK
    share = tl.cdiv(k, tl.maximum(full, 1))
    usable = (full > 0) & (share <= CHUNK)
    return tl.where(usable, full, 0), tl.where(usable, share, 0)


@triton.jit
def _lower_bound_of(values, need, STEPS: tl.constexpr, SLACK: tl.constexpr):
    """A key b with count(values >= b) >= need (values: int32 keys, need <= their number), as
    large as STEPS halvings of the values' range get it; a halving that leaves at most
    ``need + need // SLACK`` values at or above b (exactly ``need`` when SLACK is 0) ends the
    search."""
    # invariant: at_low = count(values >= low) >= need > count(values >= high)
    low = tl.min(values, axis=0).to(tl.int64)
    high = tl.max(values, axis=0).to(tl.int64) + 1
    at_low = tl.full((), values.shape[0], tl.int32)
    enough_at_low = need
    if SLACK > 0:
        enough_at_low = need + need // SLACK
    step = 0
    while (step < STEPS) & (at_low > enough_at_low):
        mid = (low + high) >> 1
        count = tl.sum((values >= mid.to(tl.int32)).to(tl.int32), axis=0)
        enough = count >= need
        low = tl.where(enough, mid, low)
        at_low = tl.where(enough, count, at_low)
        high = tl.where(enough, high, mid)
        step += 1
    return low.to(tl.int32)


@triton.jit(do_not_specialize=["num_cols", "k"], do_not_specialize_on_alignment=["lengths_ptr"])
def _split_bound_kernel(
    logits_ptr,
    lengths_ptr,
    counts_ptr,  # [2, rows]: candidates appended, programs arrived
    bounds_ptr,
    stride_logits_row,
    num_cols,
    k,
    CHUNK: tl.constexpr,
    GROUP: tl.constexpr,
    SLACK: tl.constexpr,
    DEPENDENT: tl.constexpr,  # the collect launch depends on this one programmatically
):
    if DEPENDENT:  # it may start now: it reads nothing this launch writes before it waits
        gdc_launch_dependents()
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    if n > k:
        if chunk == 0:  # the collect launch counts into these
            tl.store(counts_ptr + row, 0)
            tl.store(counts_ptr + tl.num_programs(0) + row, 0)
        full, share = _keys_per_full_chunk(n, k, CHUNK)
        if chunk < full:
            cols = chunk * CHUNK + tl.arange(0, CHUNK)
            keys = _load_keys(logits_ptr + row.to(tl.int64) * stride_logits_row, cols, n)
            bound = _chunk_bound(keys, share, CHUNK, GROUP, SLACK)
            tl.store(bounds_ptr + row.to(tl.int64) * tl.num_programs(1) + chunk, bound)


@triton.jit
def _chunk_bound(keys, share, CHUNK: tl.constexpr, GROUP: tl.constexpr, SLACK: tl.constexpr):
    """A key with at least ``share`` of a full chunk's keys at or above it, nearly the highest
    (within ``share // SLACK`` keys of it)."""
    if GROUP > 1 and share * _GROUPS_PER_KEY <= CHUNK // GROUP:
        # The maxima of disjoint groups are distinct keys, so a bound met by `share` maxima is
        # met by the chunk; with 4 groups per needed key it is nearly as tight (top keys rarely
        # share a group), for 1/GROUP of the search's work. Any grouping will do: let the
        # compiler keep each group in one thread.
        groups = tl.reshape(keys, (CHUNK // GROUP, GROUP), can_reorder=True)
        bound = _lower_bound_of(tl.max(groups, axis=1), share, _BOUND_STEPS, SLACK)
    else:  # one return: an early one in a branch on a runtime value does not compile for GPUs
        bound = _lower_bound_of(keys, share, _BOUND_STEPS, SLACK)
    return bound


@triton.jit
def _row_bound(bounds_ptr, row, n, k, nchunks, CHUNK: tl.constexpr):
    # the smallest of the row's chunk bounds (_KEY_MIN, i.e. no bound, when the row has none)
    full, share = _keys_per_full_chunk(n, k, CHUNK)
    bound = tl.full((), _KEY_MAX, tl.int32)
    for c0 in range(0, full, 64):
        c = c0 + tl.arange(0, 64)
        b = tl.load(bounds_ptr + row.to(tl.int64) * nchunks + c, mask=c < full, other=_KEY_MAX)
        bound = tl.minimum(bound, tl.min(b, axis=0))
    return tl.where(full > 0, bound, _KEY_MIN).to(tl.int64)


@triton.jit
def _split_five_ways(keys, valid, need, low, high, at_low):
    """One step of the k-th largest search that cuts [low, high) five ways instead of two:
    the counts at four thresholds share one reduction (16-bit fields of one int64 sum; fewer
    than 65536 valid keys), so the search takes ~2.3x fewer dependent reductions. Keeps
    count(keys >= low) >= need > count(keys >= high), and returns count(keys >= low) (given
    as ``at_low``)."""
    step = tl.maximum((high - low + 4) // 5, 1)
    t1 = tl.minimum(low + step, high - 1)
    t2 = tl.minimum(low + 2 * step, high - 1)
    t3 = tl.minimum(low + 3 * step, high - 1)
    t4 = tl.minimum(low + 4 * step, high - 1)
    one = tl.full((), 1, tl.int64)
    packed = (
        tl.where(valid & (keys >= t1.to(tl.int32)), one, 0)
        + tl.where(valid & (keys >= t2.to(tl.int32)), one << 16, 0)
        + tl.where(valid & (keys >= t3.to(tl.int32)), one << 32, 0)
        + tl.where(valid & (keys >= t4.to(tl.int32)), one << 48, 0)
    )
    total = tl.sum(packed, axis=0)
    c1 = (total & 0xFFFF).to(tl.int32)
    c2 = ((total >> 16) & 0xFFFF).to(tl.int32)
    c3 = ((total >> 32) & 0xFFFF).to(tl.int32)
    c4 = ((total >> 48) & 0xFFFF).to(tl.int32)
    # counts fall as thresholds rise: the thresholds with enough keys form a prefix
    ok1 = c1 >= need
    ok2 = c2 >= need
    ok3 = c3 >= need
    ok4 = c4 >= need
    new_low = tl.where(ok4, t4, tl.where(ok3, t3, tl.where(ok2, t2, tl.where(ok1, t1, low))))
    new_high = tl.where(ok4, high, tl.where(ok3, t4, tl.where(ok2, t3, tl.where(ok1, t2, t1))))
    counted = tl.where(ok4, c4, tl.where(ok3, c3, tl.where(ok2, c2, tl.where(ok1, c1, at_low))))
    return new_low, new_high, counted


@triton.jit
def _list_slots(row_cands_ptr, CANDIDATES: tl.constexpr):
    """Every slot of a row's candidate list, unmasked (each slot is allocated; those past the
    row's count hold stale values, masked by :func:`_finish_row`), read through L2 (written by
    other programs): issued before the count is known, the load leaves the chain of
    dependent reads the finish waits on."""
    return tl.load(row_cands_ptr + tl.arange(0, CANDIDATES), cache_modifier=".cg")


@triton.jit
def _finish_row(
    row_ptr,
    row_cands_ptr,
    row_cand_keys_ptr,
    out_row_ptr,
    n,
    k,
    low,
    num_cands,
    listed_cols,
    listed_keys,
    CANDIDATES: tl.constexpr,
    KEYS_LISTED: tl.constexpr,
):
    """Write the row's k largest columns, given a key ``low`` <= its k-th largest key and the
    row's candidate list (every column with key >= low, up to the list's reserve: see
    _LIST_RESERVE; a list past it is ignored and the whole row searched), its first CANDIDATES
    slots already loaded (``listed_cols``, and ``listed_keys`` with KEYS_LISTED: the
    candidates' keys listed beside their columns; else they are read from the row)."""
    slots = tl.arange(0, CANDIDATES)
    if num_cands <= CANDIDATES:  # every key >= the k-th largest is in the list
        in_list = slots < num_cands
        cols = tl.where(in_list, listed_cols, 0)
        if KEYS_LISTED:
            keys = tl.where(in_list, listed_keys, 0)
        else:
            keys = _load_keys(row_ptr, cols, n)
        # the k-th largest key t: count(key >= low) >= k > count(key >= high); done when
        # exactly k keys are >= low (all of them are taken: the ties below are all at low)
        high = tl.max(tl.where(in_list, keys, _KEY_MIN), axis=0).to(tl.int64) + 1
        at_low = num_cands
        while (high - low > 1) & (at_low != k):
            low, high, at_low = _split_five_ways(keys, in_list, k, low, high, at_low)
        threshold = low.to(tl.int32)
        above = in_list & (keys > threshold)
        tie = in_list & (keys == threshold)
        n_above = tl.sum(above.to(tl.int32), axis=0)
        tl.store(out_row_ptr + tl.cumsum(above.to(tl.int32), axis=0) - 1, cols, mask=above)
        tie_rank = tl.cumsum(tie.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + n_above + tie_rank, cols, mask=tie & (tie_rank < k - n_above))
    elif num_cands <= CANDIDATES * _LIST_RESERVE:  # in the reserve: search the list, streamed
        if KEYS_LISTED:
            source: tl.constexpr = _LIST_KEYS
        else:
            source: tl.constexpr = _LIST
        _select_from(
            row_ptr,
            row_cands_ptr,
            row_cand_keys_ptr,
            out_row_ptr,
            slots,
            n,
            num_cands,
            k,
            CANDIDATES,
            source,
        )
    else:  # past the reserve: the one-program-per-row search, streaming the row
        _select_from(row_ptr, row_ptr, row_ptr, out_row_ptr, slots, n, n, k, CANDIDATES, _ROW)


@triton.jit
def _finish_from_keyed_list(
    row_ptr,
    row_cands_ptr,
    row_cand_keys_ptr,
    out_row_ptr,
    n,
    k,
    bound,
    num_cands,
    CANDIDATES: tl.constexpr,
):
    """:func:`_finish_row` from a list with its keys beside its columns (the coop and listed
    paths), its slots below the count read through L2 (other threads wrote them)."""
    slots = tl.arange(0, CANDIDATES)
    in_list = slots < num_cands
    _finish_row(
        row_ptr,
        row_cands_ptr,
        row_cand_keys_ptr,
        out_row_ptr,
        n,
        k,
        bound,
        num_cands,
        tl.load(row_cands_ptr + slots, mask=in_list, other=0, cache_modifier=".cg"),
        tl.load(row_cand_keys_ptr + slots, mask=in_list, other=0, cache_modifier=".cg"),
        CANDIDATES,
        True,
    )


@triton.jit(
    do_not_specialize=["stride_out_row", "num_cols", "k"],
    do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"],
)
def _split_collect_kernel(
    logits_ptr,
    lengths_ptr,
    counts_ptr,  # [2, rows]: candidates appended, programs arrived
    bounds_ptr,
    cands_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    CHUNK: tl.constexpr,
    CANDIDATES: tl.constexpr,
    FINISH: tl.constexpr,  # the row's last program finishes it (else _split_finish_kernel does)
    DEPENDENT: tl.constexpr,  # a programmatic dependent launch of the bound launch
    PRELOAD: tl.constexpr,  # load the chunk before the row's bound (see TopkConfig)
):
    tl.static_assert(CANDIDATES < 65536, "the five-way search counts in 16-bit fields")
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    nchunks = tl.num_programs(1)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    if n <= k:
        if chunk == 0:
            _write_short_row(out_row_ptr, n, k, CHUNK)
    elif chunk * CHUNK < n:
        row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
        row_cands_ptr = _row_list(cands_ptr, row, CANDIDATES)
        if PRELOAD:
            cols = _chunk_as_rows(chunk * CHUNK, CHUNK)
            keys = _load_keys(row_ptr, cols, n)
        if DEPENDENT:  # the bounds and the zeroed counts are the bound launch's
            gdc_wait()
        bound = _row_bound(bounds_ptr, row, n, k, nchunks, CHUNK)
        if not PRELOAD:  # nothing of the chunk held across the bound's reads
            cols = _chunk_as_rows(chunk * CHUNK, CHUNK)
            keys = _load_keys(row_ptr, cols, n)
        _append_candidates(
            counts_ptr + row, row_cands_ptr, row_cands_ptr, cols, keys, n, bound, CANDIDATES, False
        )
        if FINISH:
            # Release this program's candidates before arriving (barrier, then a release by the
            # arriving thread); the last to arrive (acquire) sees every program's candidates and
            # finishes the row.
            tl.debug_barrier()
            arrived = tl.atomic_add(counts_ptr + tl.num_programs(0) + row, 1, sem="acq_rel")
            if arrived == tl.cdiv(n, CHUNK) - 1:
                # the arrival acquired: the count and the list are read together
                num_cands = tl.load(counts_ptr + row, cache_modifier=".cg")
                listed = _list_slots(row_cands_ptr, CANDIDATES)
                _finish_row(
                    row_ptr,
                    row_cands_ptr,
                    row_cands_ptr,
                    out_row_ptr,
                    n,
                    k,
                    bound,
                    num_cands,
                    listed,
                    listed,
                    CANDIDATES,
                    False,
                )


@triton.jit(
    do_not_specialize=["stride_out_row", "num_cols", "k", "nchunks"],
    do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"],
)
def _split_finish_kernel(
    logits_ptr,
    lengths_ptr,
    counts_ptr,
    bounds_ptr,
    cands_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    nchunks,
    CHUNK: tl.constexpr,
    CANDIDATES: tl.constexpr,
):
    """One program per row: the collect launch's finishing step, for rows longer than k (the
    collect launch wrote the others), after every collect program has run."""
    row = tl.program_id(0)
    # the length, the count and the list do not depend on one another: read them together
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    num_cands = tl.load(counts_ptr + row)
    row_cands_ptr = _row_list(cands_ptr, row, CANDIDATES)
    listed = _list_slots(row_cands_ptr, CANDIDATES)
    if n > k:
        bound = _row_bound(bounds_ptr, row, n, k, nchunks, CHUNK)
        _finish_row(
            logits_ptr + row.to(tl.int64) * stride_logits_row,
            row_cands_ptr,
            row_cands_ptr,
            out_ptr + row.to(tl.int64) * stride_out_row,
            n,
            k,
            bound,
            num_cands,
            listed,
            listed,
            CANDIDATES,
            False,
        )


@triton.jit
def _chunk_as_rows(start, CHUNK: tl.constexpr):
    """The columns of a chunk as rows of _APPEND_ROW consecutive columns (see
    :func:`_append_candidates`)."""
    return start + (
        tl.arange(0, CHUNK // _APPEND_ROW)[:, None] * _APPEND_ROW
        + tl.arange(0, _APPEND_ROW)[None, :]
    )


@triton.jit
def _append_candidates(
    count_ptr,
    row_cands_ptr,
    row_cand_keys_ptr,
    cols,
    keys,
    n,
    bound,
    CANDIDATES: tl.constexpr,
    KEYS_LISTED: tl.constexpr,
):
    """Append a chunk's columns whose key is >= ``bound`` to the row's candidate list (one
    atomic reserves the slots; slots past the list's reserve are counted, not written), with their
    keys beside them when KEYS_LISTED. ``cols`` and ``keys`` hold the chunk as rows of
    consecutive keys (:func:`_chunk_as_rows`)."""
    take = _taken(cols, keys, n, bound)
    per_row = tl.sum(take, axis=1)
    first = tl.atomic_add(count_ptr, tl.sum(per_row, axis=0), sem="relaxed")
    _list_taken(
        row_cands_ptr, row_cand_keys_ptr, cols, keys, take, per_row, first, CANDIDATES, KEYS_LISTED
    )


@triton.jit
def _taken(cols, keys, n, bound):
    """1 where a column of the row has a key >= ``bound``, else 0."""
    return ((cols < n) & (keys >= bound.to(tl.int32))).to(tl.int32)


@triton.jit
def _list_taken(
    row_cands_ptr,
    row_cand_keys_ptr,
    cols,
    keys,
    take,
    per_row,
    first,
    CANDIDATES: tl.constexpr,
    KEYS_LISTED: tl.constexpr,
):
    """Write the columns taken (rows of consecutive keys; ``per_row``: how many a row takes),
    with their keys when KEYS_LISTED, from slot ``first`` of the row's list on, up to its
    reserve: a prefix sum along each short row and one over the rows' counts place them. One
    prefix sum over the whole chunk was most of the collect launch's instructions (a few
    percent of its keys pass; the launch is bound by its instructions where rows are many:
    benchmarks/kernel_work/83d36f4/)."""
    before = tl.cumsum(per_row, axis=0) - per_row
    slot = first + before[:, None] + tl.cumsum(take, axis=1) - 1
    listed = (take != 0) & (slot < CANDIDATES * _LIST_RESERVE)
    tl.store(row_cands_ptr + slot, cols, mask=listed)
    if KEYS_LISTED:
        tl.store(row_cand_keys_ptr + slot, keys, mask=listed)


@triton.jit
def _wait_for(counter_ptr, target):
    """Spin until the counter reaches ``target`` (an acquire: what was released before each
    arrival is visible after)."""
    arrived = tl.atomic_add(counter_ptr, 0, sem="acquire")
    while arrived < target:
        arrived = tl.atomic_add(counter_ptr, 0, sem="acquire")


# -- coop path: the split path in one launch ------------------------------------------------
# Grid (chunks, rows): a row's programs are consecutive in launch order, so once any of them
# runs, the rest start as earlier rows finish. Each program loads its chunk once and keeps it in
# registers: it lowers the row's bound to its chunk bound (atomic min) and arrives; after all of
# the row's programs arrived (a spin on the arrival count) it appends its candidates, keys
# beside columns, and the last to append finishes the row from the list alone, then restores
# the row's state for the next call (the row states are the caller's, zeroed but for the bound,
# and left so). The interpreter runs programs one after another, where a spinning program would
# wait forever: there the launch runs as its two halves (HALF 1 then 2), the second passing the
# barrier at once.
@triton.jit(
    do_not_specialize=["stride_out_row", "num_cols", "k"],
    do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"],
)
def _coop_topk_kernel(
    logits_ptr,
    lengths_ptr,
    states_ptr,  # [rows, 4]: bound, bounds arrived, candidates appended, programs appended
    cands_ptr,
    cand_keys_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    CHUNK: tl.constexpr,
    GROUP: tl.constexpr,
    SLACK: tl.constexpr,
    CANDIDATES: tl.constexpr,
    HALF: tl.constexpr,  # 0: all of it; 1: up to the barrier; 2: from it
):
    tl.static_assert(CANDIDATES < 65536, "the five-way search counts in 16-bit fields")
    chunk = tl.program_id(0)
    row = tl.program_id(1)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    if n <= k:
        if (chunk == 0) & (HALF != 1):
            _write_short_row(out_row_ptr, n, k, CHUNK)
    elif chunk * CHUNK < n:
        parts = tl.cdiv(n, CHUNK)
        state = states_ptr + row * _COOP_STATE
        row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
        cols = chunk * CHUNK + tl.arange(0, CHUNK)
        keys = _load_keys(row_ptr, cols, n)
        full, share = _keys_per_full_chunk(n, k, CHUNK)
        if HALF != 2:
            if chunk < full:
                tl.atomic_min(state, _chunk_bound(keys, share, CHUNK, GROUP, SLACK), sem="relaxed")
            tl.debug_barrier()
            tl.atomic_add(state + 1, 1, sem="release")
        if HALF != 1:
            _wait_for(state + 1, parts)
            bound = tl.where(full > 0, tl.load(state, cache_modifier=".cg"), _KEY_MIN).to(tl.int64)
            row_cands_ptr = _row_list(cands_ptr, row, CANDIDATES)
            row_cand_keys_ptr = _row_list(cand_keys_ptr, row, CANDIDATES)
            _append_candidates(
                state + 2,
                row_cands_ptr,
                row_cand_keys_ptr,
                _chunk_as_rows(chunk * CHUNK, CHUNK),
                tl.reshape(keys, (CHUNK // _APPEND_ROW, _APPEND_ROW)),  # the bound's keys, as rows
                n,
                bound,
                CANDIDATES,
                True,
            )
            # as in _split_collect_kernel: release, arrive; the last to arrive finishes the row
            tl.debug_barrier()
            if tl.atomic_add(state + 3, 1, sem="acq_rel") == parts - 1:
                # the count, then the list's slots below it: reading every slot with the
                # count (as the split path does) lost 0.1-0.5 us here
                # (benchmarks/kernel_work/finish_reads/)
                num_cands = tl.atomic_add(state + 2, 0, sem="acquire")
                _finish_from_keyed_list(
                    row_ptr,
                    row_cands_ptr,
                    row_cand_keys_ptr,
                    out_row_ptr,
                    n,
                    k,
                    bound,
                    num_cands,
                    CANDIDATES,
                )
                fields = tl.arange(0, _COOP_STATE)
                tl.store(state + fields, tl.where(fields == 0, _KEY_MAX, 0))


# -- listed path: one program per row, the split path's steps without meeting anyone -------
# The program bounds its row's k-th largest key from below by the chunk bound's search over the
# maxima of GROUP consecutive keys (the keys die once reduced), lists the columns at or above
# the bound (keys beside them) in the row's candidate list, reading the row again (from L1) in
# blocks of APPEND keys, and finishes the row from the list (a five-way search over ~1.2 k
# listed keys) instead of bisecting all its keys. Holding a block of keys at a time, it keeps
# two programs of 8192-key rows on a multiprocessor (108 registers at 8 warps, 64 at 16;
# ptxas, sm_90a), where holding the row through the listing took 204 / 115.
@triton.jit(
    do_not_specialize=["stride_out_row", "num_cols", "k"],
    do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"],
)
def _listed_topk_kernel(
    logits_ptr,
    lengths_ptr,
    cands_ptr,
    cand_keys_ptr,
    out_ptr,
    stride_logits_row,
    stride_out_row,
    num_cols,
    k,
    BLOCK: tl.constexpr,
    GROUP: tl.constexpr,
    SLACK: tl.constexpr,
    CANDIDATES: tl.constexpr,
    APPEND: tl.constexpr,
):
    tl.static_assert(CANDIDATES < 65536, "the five-way search counts in 16-bit fields")
    row = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    if n <= k:
        _write_short_row(out_row_ptr, n, k, APPEND)
    else:
        row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
        bound = _row_bound_of_maxima(row_ptr, n, k, BLOCK, GROUP, SLACK).to(tl.int64)
        row_cands_ptr = _row_list(cands_ptr, row, CANDIDATES)
        row_cand_keys_ptr = _row_list(cand_keys_ptr, row, CANDIDATES)
        num_cands = tl.full((), 0, tl.int32)
        for start in range(0, n, APPEND):
            cols = _chunk_as_rows(start, APPEND)
            keys = _load_keys(row_ptr, cols, n)
            take = _taken(cols, keys, n, bound)
            per_row = tl.sum(take, axis=1)
            first = num_cands
            _list_taken(
                row_cands_ptr, row_cand_keys_ptr, cols, keys, take, per_row, first, CANDIDATES, True
            )
            num_cands += tl.sum(per_row, axis=0)
        tl.debug_barrier()  # the program's list writes, visible to all its threads
        _finish_from_keyed_list(
            row_ptr,
            row_cands_ptr,
            row_cand_keys_ptr,
            out_row_ptr,
            n,
            k,
            bound,
            num_cands,
            CANDIDATES,
        )


@triton.jit
def _row_bound_of_maxima(
    row_ptr, n, k, BLOCK: tl.constexpr, GROUP: tl.constexpr, SLACK: tl.constexpr
):
    """A key with at least k of the row's n (> k) keys at or above it, nearly the k-th largest:
    searched over the maxima of GROUP consecutive keys where there are _GROUPS_PER_KEY of them
    per needed key, else over every key (columns past the row hold the smallest key). It is
    :func:`_chunk_bound` with the groups loaded in place: the row loaded flat and regrouped by
    ``_chunk_bound``'s reshape took 82 registers at 16 warps against 64, one program of 8192-key
    rows a multiprocessor instead of two (ptxas, sm_90a)."""
    cols = tl.arange(0, BLOCK // GROUP)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    keys = tl.where(cols < n, _load_keys(row_ptr, cols, n), _KEY_MIN)
    if k * _GROUPS_PER_KEY <= BLOCK // GROUP:
        bound = _lower_bound_of(tl.max(keys, axis=1), k, _BOUND_STEPS, SLACK)
    else:
        bound = _lower_bound_of(
            tl.reshape(keys, (BLOCK,), can_reorder=True), k, _BOUND_STEPS, SLACK
        )
    return bound


class WorkspaceLayout(NamedTuple):
    """What one top-k call needs beside its arguments."""

    regions: tuple[int, ...]  # int32 regions allocated per call (uninitialized)
    row_states: int = 0  # rows of coop row states, kept per device and stream (first)


_NO_WORKSPACE = WorkspaceLayout(())


def workspace_sizes(num_rows: int, num_cols: int, cfg: TopkConfig) -> WorkspaceLayout:
    """The workspace one top-k call needs (none on the one-program paths but ``listed``)."""
    listed = num_rows * cfg.candidates * _CANDIDATE_LISTS  # the list and its reserve
    if cfg.path == "coop":
        return WorkspaceLayout((listed,) * 2, num_rows)
    if cfg.path == "listed":
        return WorkspaceLayout((listed,) * 2)
    if cfg.path != "split":
        return _NO_WORKSPACE
    nchunks = cdiv(num_cols, cfg.block)
    return WorkspaceLayout((2 * num_rows, num_rows * nchunks, listed))


def _split_launches(logits, lengths, k, out, cfg: TopkConfig, workspace) -> list[KernelLaunch]:
    rows, num_cols = logits.shape
    nchunks = cdiv(num_cols, cfg.block)
    counts, bounds, cands = workspace
    stride = logits.stride(0)
    grid = (rows, nchunks)
    finish_apart = cfg.finish_warps > 0
    dependent = cfg.dependent_launch and not interpreting()  # griddepcontrol is GPU code
    collect_options = dict(launch_pdl=True) if dependent else {}
    launches = [
        KernelLaunch(
            _split_bound_kernel,
            grid,
            (logits, lengths, counts, bounds, stride, num_cols, k),
            dict(
                CHUNK=cfg.block,
                GROUP=cfg.group,
                SLACK=cfg.bound_slack,
                DEPENDENT=dependent,
                num_warps=cfg.num_warps,
            ),
        ),
        KernelLaunch(
            _split_collect_kernel,
            grid,
            (logits, lengths, counts, bounds, cands, out, stride, out.stride(0), num_cols, k),
            dict(
                CHUNK=cfg.block,
                CANDIDATES=cfg.candidates,
                FINISH=not finish_apart,
                DEPENDENT=dependent,
                PRELOAD=cfg.collect_preload,
                num_warps=cfg.collect_warps,
                **collect_options,
            ),
        ),
    ]
    if finish_apart:
        launches.append(
            KernelLaunch(
                _split_finish_kernel,
                (rows,),
                (
                    logits,
                    lengths,
                    counts,
                    bounds,
                    cands,
                    out,
                    stride,
                    out.stride(0),
                    num_cols,
                    k,
                    nchunks,
                ),
                dict(
                    CHUNK=cfg.block,
                    CANDIDATES=cfg.candidates,
                    num_warps=cfg.finish_warps,
                ),
            )
        )
    return launches


def _coop_launches(logits, lengths, k, out, cfg: TopkConfig, workspace) -> list[KernelLaunch]:
    rows, num_cols = logits.shape
    states, cands, cand_keys = workspace
    args = (logits, lengths, states, cands, cand_keys, out, logits.stride(0), out.stride(0))
    options = dict(
        CHUNK=cfg.block, GROUP=cfg.group, SLACK=cfg.bound_slack, CANDIDATES=cfg.candidates
    )
    return [
        KernelLaunch(
            _coop_topk_kernel,
            (cdiv(num_cols, cfg.block), rows),
            (*args, num_cols, k),
            dict(options, HALF=half, num_warps=cfg.num_warps),
        )
        for half in ((1, 2) if interpreting() else (0,))
    ]


def _listed_launches(logits, lengths, k, out, cfg: TopkConfig, workspace) -> list[KernelLaunch]:
    rows, num_cols = logits.shape
    cands, cand_keys = workspace
    return [
        KernelLaunch(
            _listed_topk_kernel,
            (rows,),
            (logits, lengths, cands, cand_keys, out, logits.stride(0), out.stride(0), num_cols, k),
            dict(
                BLOCK=cfg.block,
                GROUP=cfg.group,
                SLACK=cfg.bound_slack,
                CANDIDATES=cfg.candidates,
                APPEND=cfg.append,
                num_warps=cfg.num_warps,
            ),
        )
    ]


_WORKSPACE_LAUNCHES = {"split": _split_launches, "coop": _coop_launches, "listed": _listed_launches}


def allocate_workspace(logits, layout: WorkspaceLayout) -> tuple:
    """The tensors of :func:`workspace_sizes`' layout on ``logits``' device: the coop row states
    (if any), then the int32 regions, one allocation, each 16-byte aligned (a stable
    specialization); regions are not initialized: the split path's bound launch zeroes what is
    accumulated into."""
    states = (_row_states(logits, layout.row_states),) if layout.row_states else ()
    if not layout.regions:
        return states
    padded = [cdiv(size, 4) * 4 for size in layout.regions]
    if isinstance(logits, TensorMeta):  # planning: only dtype and alignment matter
        return states + tuple(TensorMeta((size,), torch.int32) for size in padded)
    total = sum(padded)
    flat = torch.empty(max(total, 1), dtype=torch.int32, device=logits.device)
    regions = flat.split_with_sizes(padded) if total else (flat,) * len(padded)
    return states + tuple(regions)


# Coop row states by (device, stream): each coop launch leaves the rows it used as it found
# them, so calls in one stream share them; calls in other streams may overlap, so they have
# their own. Outgrown ones stay alive: a graph captured from launches built before it
# (ragged_topk_launches) may still use them.
# A call captured in a CUDA graph takes rows of its own (two graphs captured on one stream may
# be replayed on two at once) from a pool set up by the first uncaptured call on the device, so
# the graph holds no kernels that set them up; where the pool is missing or used up, the graph
# sets up its own (correct, two more nodes a call). Rows of a freed graph are not reused. The
# pool is set up on the stream of that first call, before any capture (torch.cuda.graph
# synchronizes the device before it begins one).
_row_states_by_stream: dict = {}
_outgrown_row_states: list = []
_CAPTURE_POOL_ROWS = 1 << 16  # 1 MiB a device: thousands of captured calls of up to 128 rows
_capture_pools: dict = {}  # device -> [states, rows taken]


def _row_states(logits, rows: int):
    if isinstance(logits, TensorMeta):
        return TensorMeta((rows * _COOP_STATE_INTS,), torch.int32)
    device = logits.device
    if stream_capturing(device):
        return _captured_row_states(device, rows)
    key = (device, current_stream_handle(device))
    states = _row_states_by_stream.get(key)
    if states is not None and states.shape[0] >= rows:
        return states
    if states is not None:
        _outgrown_row_states.append(states)
    if device not in _capture_pools:
        _capture_pools[device] = [_fresh_row_states(device, _CAPTURE_POOL_ROWS), 0]
    fresh = _row_states_by_stream[key] = _fresh_row_states(device, rows)
    return fresh


def _captured_row_states(device, rows: int):
    pool = _capture_pools.get(device)
    if pool is None or pool[1] + rows > pool[0].shape[0]:
        _log.debug("coop row states set up inside a captured graph (no pool rows left)")
        return _fresh_row_states(device, rows)
    taken = pool[0][pool[1] : pool[1] + rows]
    pool[1] += rows
    return taken


def _fresh_row_states(device, rows: int):
    states = torch.zeros(
        (max(rows, COOP_MAX_PROGRAMS), _COOP_STATE_INTS), dtype=torch.int32, device=device
    )
    states[:, 0] = _KEY_MAX.value  # no bound yet: the row's chunk bounds lower it (atomic min)
    return states


def ragged_topk_launches(
    logits, lengths, k, out, config: TopkConfig | None = None
) -> list[KernelLaunch]:
    """Every launch of one ragged top-k, in order; ``config`` overrides
    :func:`topk_launch_config` (tests, benchmarks)."""
    _check_topk(logits, lengths, k, out)
    return checked_topk_launches(logits, lengths, k, out, config)


def checked_topk_launches(logits, lengths, k, out, config: TopkConfig | None = None):
    """:func:`ragged_topk_launches` for arguments a caller has already checked as
    ``_check_topk`` does (the selects: their logits are their own)."""
    return checked_topk_call(logits, lengths, k, out, config)[0]


def checked_topk_call(logits, lengths, k, out, config: TopkConfig | None = None):
    """(launches, workspace sizes, the workspace regions they use) of one checked top-k call."""
    cfg = config or topk_launch_config(logits.shape[1], k, logits.shape[0], device_arch(logits))
    if cfg.path in _WORKSPACE_LAUNCHES:
        layout = workspace_sizes(logits.shape[0], logits.shape[1], cfg)
        workspace = allocate_workspace(logits, layout)
        launches = _WORKSPACE_LAUNCHES[cfg.path](logits, lengths, k, out, cfg, workspace)
        return launches, layout, workspace
    return [_per_row_launch(logits, lengths, k, out, cfg)], _NO_WORKSPACE, ()


def _check_topk(logits, lengths, k, out):
    check_tensor("logits", logits, ndim=2, dtypes=(torch.float32,))
    check_tensor("lengths", lengths, ndim=1, dtypes=(torch.int32,))
    check_tensor("out", out, ndim=2, dtypes=(torch.int32,))
    check_int("k", k, minimum=1)
    rows, num_cols = logits.shape
    check_shape("lengths", lengths, (rows,))
    check_shape("out", out, (rows, k))
    if num_cols > 1 and logits.stride(1) != 1:
        raise ValueError("logits rows must be contiguous (stride(1) == 1); a row stride is fine")
    if rows > 1 and lengths.stride(0) != 1:
        raise ValueError("lengths must be contiguous; call .contiguous()")
    if k > 1 and out.stride(1) != 1:
        raise ValueError("out must be contiguous in its last dimension")
    check_same_device(logits=logits, lengths=lengths, out=out)


def ragged_topk_launch(logits, lengths, k, out, config: TopkConfig | None = None) -> KernelLaunch:
    """The one-program-per-row top-k launch; ``config`` overrides :func:`topk_launch_config`."""
    _check_topk(logits, lengths, k, out)
    rows, num_cols = logits.shape
    cfg = config or topk_launch_config(num_cols, k, rows)
    if cfg.path in _WORKSPACE_LAUNCHES:
        raise ValueError(f"the {cfg.path} path needs a workspace: use ragged_topk_launches")
    return _per_row_launch(logits, lengths, k, out, cfg)


def _per_row_launch(logits, lengths, k, out, cfg: TopkConfig) -> KernelLaunch:
    rows, num_cols = logits.shape
    return KernelLaunch(
        _ragged_topk_kernel,
        (rows,),
        (logits, lengths, out, logits.stride(0), out.stride(0), num_cols, k),
        dict(
            BLOCK=cfg.block,
            SINGLE=cfg.path == "single",
            OUT_BLOCK=cfg.out_block,
            num_warps=cfg.num_warps,
        ),
    )


def ragged_topk(logits: torch.Tensor, lengths: torch.Tensor, k: int, out: torch.Tensor) -> None:
    """For each row r: ``out[r]`` = indices of the k largest of ``logits[r, :lengths[r]]`` (any
    order); when ``lengths[r] <= k``, ``0..lengths[r]-1`` then -1. logits float32 [rows, width]
    (rows contiguous, any row stride), lengths int32 [rows] (clamped to [0, width]), out int32
    [rows, k]. Which of several columns tied at the k-th value are taken is unspecified (the
    lowest-indexed for rows of one program, any on the paths that spread a row over many
    programs). No host-device synchronization."""
    tensors = (logits, lengths, out)
    key = call_key(tensors, (k,))
    call, sizes = _prepared_topks.get(key, (None, _NO_WORKSPACE))
    if call is not None and call.ready():
        if call.launch((*tensors, *allocate_workspace(logits, sizes))):
            return
    _check_topk(logits, lengths, k, out)
    launches, sizes, workspace = checked_topk_call(logits, lengths, k, out)
    for launch in launches:
        launch.run()
    remember_prepared(
        _prepared_topks, key, launches, (*tensors, *workspace), fresh=len(workspace), extra=sizes
    )


# checked calls by call_key, replayed without their checks and launch choices
_prepared_topks: dict = {}
