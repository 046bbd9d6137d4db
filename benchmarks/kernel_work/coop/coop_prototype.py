"""Scratch prototype: the split top-k in ONE launch. A row's programs are consecutive in launch
order (grid (chunks, rows)); they meet at a spin barrier after the chunk bounds, collect with
their keys still in registers, and the last to arrive finishes from (key, col) lists.
PHASE 0: one launch (GPU). PHASE 1 then PHASE 2: the two halves as two launches (interpreter)."""
import torch
import triton
import triton.language as tl

from kernels.topk import (
    _GROUPS_PER_KEY,
    _KEY_MAX,
    _KEY_MIN,
    _BOUND_STEPS,
    _keys_per_full_chunk,
    _kth_largest_bisect,
    _load_keys,
    _lower_bound_of,
    _split_five_ways,
    _write_selected,
    _write_short_row,
    topk_launch_config,
)


@triton.jit
def _bound_five(values, need, STEPS: tl.constexpr):
    low = tl.min(values, axis=0).to(tl.int64)
    high = tl.max(values, axis=0).to(tl.int64) + 1
    at_low = tl.full((), values.shape[0], tl.int32)
    valid = values >= _KEY_MIN
    step = 0
    while (step < STEPS) & (at_low != need) & (high - low > 1):
        low, high, at_low = _split_five_ways(values, valid, need, low, high, at_low)
        step += 1
    return low.to(tl.int32)


@triton.jit
def _finish_listed(ckeys_ptr, ccols_ptr, row_ptr, out_row_ptr, n, k, low, num, CANDIDATES: tl.constexpr):
    slots = tl.arange(0, CANDIDATES)
    if num <= CANDIDATES:
        in_list = slots < num
        keys = tl.load(ckeys_ptr + slots, mask=in_list, other=_KEY_MIN, cache_modifier=".cg")
        high = tl.max(keys, axis=0).to(tl.int64) + 1
        at_low = num
        while (high - low > 1) & (at_low != k):
            low, high, at_low = _split_five_ways(keys, in_list, k, low, high, at_low)
        threshold = low.to(tl.int32)
        cols = tl.load(ccols_ptr + slots, mask=in_list, other=0, cache_modifier=".cg")
        above = in_list & (keys > threshold)
        tie = in_list & (keys == threshold)
        n_above = tl.sum(above.to(tl.int32), axis=0)
        tl.store(out_row_ptr + tl.cumsum(above.to(tl.int32), axis=0) - 1, cols, mask=above)
        tie_rank = tl.cumsum(tie.to(tl.int32), axis=0) - 1
        tl.store(out_row_ptr + n_above + tie_rank, cols, mask=tie & (tie_rank < k - n_above))
    else:
        threshold, ties_needed = _kth_largest_bisect(row_ptr, slots, n, k, CANDIDATES, False)
        _write_selected(row_ptr, out_row_ptr, slots, n, threshold, ties_needed, CANDIDATES, False)


@triton.jit(do_not_specialize=["stride_out_row", "num_cols", "k"],
            do_not_specialize_on_alignment=["lengths_ptr", "out_ptr"])
def _coop_kernel(logits_ptr, lengths_ptr, state_ptr, ckeys_ptr, ccols_ptr, out_ptr,
                 stride_logits_row, stride_out_row, num_cols, k,
                 CHUNK: tl.constexpr, GROUP: tl.constexpr, CANDIDATES: tl.constexpr,
                 PHASE: tl.constexpr, FIVE: tl.constexpr, MAX_SPINS: tl.constexpr):
    chunk = tl.program_id(0)
    row = tl.program_id(1)
    n = tl.minimum(tl.maximum(tl.load(lengths_ptr + row), 0), num_cols)
    out_row_ptr = out_ptr + row.to(tl.int64) * stride_out_row
    if n <= k:
        if (chunk == 0) & (PHASE != 1):
            _write_short_row(out_row_ptr, n, k, CHUNK)
    elif chunk * CHUNK < n:
        parts = tl.cdiv(n, CHUNK)
        st = state_ptr + row * 4  # bound (atomic min), bounds arrived, candidates, collected
        row_ptr = logits_ptr + row.to(tl.int64) * stride_logits_row
        cols = chunk * CHUNK + tl.arange(0, CHUNK)
        keys = _load_keys(row_ptr, cols, n)
        full, share = _keys_per_full_chunk(n, k, CHUNK)
        if PHASE != 2:
            if chunk < full:
                if GROUP > 1 and share * _GROUPS_PER_KEY <= CHUNK // GROUP:
                    groups = tl.reshape(keys, (CHUNK // GROUP, GROUP), can_reorder=True)
                    if FIVE:
                        bound = _bound_five(tl.max(groups, axis=1), share, 7)
                    else:
                        bound = _lower_bound_of(tl.max(groups, axis=1), share, _BOUND_STEPS)
                else:
                    if FIVE:
                        bound = _bound_five(keys, share, 7)
                    else:
                        bound = _lower_bound_of(keys, share, _BOUND_STEPS)
                tl.atomic_min(st, bound, sem="relaxed")
            tl.debug_barrier()
            tl.atomic_add(st + 1, 1, sem="release")
        if PHASE != 1:
            arrived = tl.atomic_add(st + 1, 0, sem="acquire")
            spins = 0
            while (arrived < parts) & (spins < MAX_SPINS):
                arrived = tl.atomic_add(st + 1, 0, sem="acquire")
                spins += 1
            bound = tl.where(full > 0, tl.load(st, cache_modifier=".cg"), _KEY_MIN)
            take = (cols < n) & (keys >= bound)
            first = tl.atomic_add(st + 2, tl.sum(take.to(tl.int32), axis=0), sem="relaxed")
            slot = first + tl.cumsum(take.to(tl.int32), axis=0) - 1
            row_c = row.to(tl.int64) * CANDIDATES
            tl.store(ccols_ptr + row_c + slot, cols, mask=take & (slot < CANDIDATES))
            tl.store(ckeys_ptr + row_c + slot, keys, mask=take & (slot < CANDIDATES))
            tl.debug_barrier()
            done = tl.atomic_add(st + 3, 1, sem="acq_rel")
            if done == parts - 1:
                num = tl.atomic_add(st + 2, 0, sem="acquire")
                _finish_listed(ckeys_ptr + row_c, ccols_ptr + row_c, row_ptr, out_row_ptr, n, k,
                               bound.to(tl.int64), num, CANDIDATES)
                tl.store(st, _KEY_MAX)
                tl.store(st + 1, 0)
                tl.store(st + 2, 0)
                tl.store(st + 3, 0)


def new_state(rows, device):
    st = torch.zeros(rows, 4, dtype=torch.int32, device=device)
    st[:, 0] = 2147483647
    return st


class Coop:
    def __init__(self, logits, k, chunk=4096, warps=8, five=True, finish_warps=None, max_spins=1 << 22):
        rows, cols = logits.shape
        cfg = topk_launch_config(cols, k, rows)
        self.cfg = cfg
        self.chunk, self.warps, self.five = chunk, warps, five
        self.state = new_state(rows, logits.device)
        self.ckeys = torch.empty(rows * cfg.candidates, dtype=torch.int32, device=logits.device)
        self.ccols = torch.empty_like(self.ckeys)
        self.max_spins = max_spins

    def __call__(self, logits, lengths, k, out, phases=(0,)):
        rows, cols = logits.shape
        grid = (triton.cdiv(cols, self.chunk), rows)
        for phase in phases:
            _coop_kernel[grid](logits, lengths, self.state, self.ckeys, self.ccols, out,
                               logits.stride(0), out.stride(0), cols, k,
                               CHUNK=self.chunk, GROUP=self.cfg.group, CANDIDATES=self.cfg.candidates,
                               PHASE=phase, FIVE=self.five, MAX_SPINS=self.max_spins,
                               num_warps=self.warps)


def check(logits, lengths, k, out):
    """tie-aware: each row n > k: indices distinct, in range, values == top-k values; else
    0..n-1 then -1."""
    rows, cols = logits.shape
    bad = 0
    for r in range(rows):
        n = int(lengths[r])
        n = max(0, min(n, cols))
        o = out[r].long()
        if n <= k:
            want = torch.full((k,), -1, dtype=torch.long, device=o.device)
            want[:n] = torch.arange(n, device=o.device)
            bad += int(not torch.equal(o, want))
            continue
        if (o < 0).any() or (o >= n).any() or o.unique().numel() != k:
            bad += 1
            continue
        got = logits[r, o].sort(descending=True).values
        want = logits[r, :n].topk(k).values
        bad += int(not torch.equal(got, want))
    return bad
