"""Variants of kernels/topk.py as text substitutions, each loadable as a module beside the tree
(kernels/_v_<name>.py), for one GPU call that times them side by side (scratch/ab_variants.py)."""
import importlib
import os

SRC = open(os.path.join(os.path.dirname(__file__), "..", "kernels", "topk.py")).read()

FIVE_LOOP = """        at_low = num_cands
        while (high - low > 1) & (at_low != k):
            low, high, at_low = _split_five_ways(keys, in_list, k, low, high, at_low)
"""
INTERP_LOOP = """        at_low = num_cands
        at_high = tl.full((), 0, tl.int32)
        while (high - low > 1) & (at_low != k):
            low, high, at_low, at_high = _interp_five_ways(
                keys, in_list, k, low, high, at_low, at_high
            )
"""
INTERP_FN = '''
@triton.jit
def _interp_five_ways(keys, valid, need, low, high, at_low, at_high):
    """A five-way step whose middle thresholds bracket the key where the count, linear between
    (low, at_low) and (high, at_high), equals need; the outer two halve what lies outside."""
    span = high - low
    est = low + (span * (at_low - need).to(tl.int64)) // tl.maximum(at_low - at_high, 1).to(tl.int64)
    w = span // 16 + 1
    t2 = tl.minimum(tl.maximum(est - w, low + 1), high - 1)
    t3 = tl.minimum(tl.maximum(est + w, t2), high - 1)
    t1 = tl.minimum(tl.maximum((low + t2) // 2, low + 1), t2)
    t4 = tl.minimum(tl.maximum((t3 + high) // 2, t3), high - 1)
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
    ok1 = c1 >= need
    ok2 = c2 >= need
    ok3 = c3 >= need
    ok4 = c4 >= need
    new_low = tl.where(ok4, t4, tl.where(ok3, t3, tl.where(ok2, t2, tl.where(ok1, t1, low))))
    new_high = tl.where(ok4, high, tl.where(ok3, t4, tl.where(ok2, t3, tl.where(ok1, t2, t1))))
    counted = tl.where(ok4, c4, tl.where(ok3, c3, tl.where(ok2, c2, tl.where(ok1, c1, at_low))))
    above = tl.where(ok4, at_high, tl.where(ok3, c4, tl.where(ok2, c3, tl.where(ok1, c2, c1))))
    return new_low, new_high, counted, above

'''


def _interp(src):
    assert FIVE_LOOP in src
    src = src.replace(FIVE_LOOP, INTERP_LOOP)
    return src.replace("\n@triton.jit\ndef _finish_row(", INTERP_FN + "\n@triton.jit\ndef _finish_row(")


def _bound_steps(n):
    def sub(src):
        old = "_BOUND_STEPS = tl.constexpr(16)"
        assert old in src
        return src.replace(old, f"_BOUND_STEPS = tl.constexpr({n})")
    return sub


BISECT_BODY = """    step = 0
    while (step < STEPS) & (at_low != need):
        mid = (low + high) >> 1
        count = tl.sum((values >= mid.to(tl.int32)).to(tl.int32), axis=0)
        enough = count >= need
        low = tl.where(enough, mid, low)
        at_low = tl.where(enough, count, at_low)
        high = tl.where(enough, high, mid)
        step += 1
    return low.to(tl.int32)
"""
FIVE_BODY = """    valid = values == values
    step = 0
    while (step < STEPS) & (at_low != need) & (high - low > 1):
        low, high, at_low = _split_five_ways(values, valid, need, low, high, at_low)
        step += 1
    return low.to(tl.int32)
"""


def _bound_five(steps):
    def sub(src):
        assert BISECT_BODY in src
        return _bound_steps(steps)(src.replace(BISECT_BODY, FIVE_BODY))
    return sub


def _slack(div, steps=16):
    def sub(src):
        old = "    while (step < STEPS) & (at_low != need):\n"
        assert old in src
        src = src.replace(old, f"    slack = need // {div}\n    while (step < STEPS) & (at_low > need + slack):\n")
        return _bound_steps(steps)(src) if steps != 16 else src
    return sub


def _no_slack(src):
    old = "BOUND_SLACK = 4\n"
    assert old in src
    return src.replace(old, "BOUND_SLACK = 0\n")


VARIANTS = {
    "noslack": [_no_slack],
    "slack4": [_slack(4)],
    "slack8": [_slack(8)],
    "slack16": [_slack(16)],
    "s12slack8": [_slack(8, 12)],
    "bound5s6": [_bound_five(6)],
    "bound5s7": [_bound_five(7)],
    "bound5s7_interp": [_bound_five(7), _interp],
    "interp": [_interp],
    "bound8": [_bound_steps(8)],
    "bound11": [_bound_steps(11)],
    "bound10": [_bound_steps(10)],
    "bound12": [_bound_steps(12)],
    "bound13": [_bound_steps(13)],
    "interp_bound8": [_interp, _bound_steps(8)],
}


COLLECT_OLD = """        cols = chunk * CHUNK + tl.arange(0, CHUNK)
        keys = _load_keys(row_ptr, cols, n)
        _append_candidates(
            counts_ptr + row, row_cands_ptr, row_cands_ptr, cols, keys, n, bound, CANDIDATES, False
        )
"""
COLLECT_FN = '''
@triton.jit
def _append_reloaded(count_ptr, row_ptr, row_cands_ptr, start, n, bound, CHUNK: tl.constexpr,
                     CANDIDATES: tl.constexpr, TILE: tl.constexpr):
    """_append_candidates for a chunk read twice: counted whole (one atomic reserves the slots),
    then reloaded a tile at a time (cache hits) to write the columns, so that no thread holds a
    prefix sum and an address for each of its chunk's keys (165-185 registers at 2 warps)."""
    cols = start + tl.arange(0, CHUNK)
    take = (cols < n) & (_load_keys(row_ptr, cols, n) >= bound.to(tl.int32))
    slot = tl.atomic_add(count_ptr, tl.sum(take.to(tl.int32), axis=0), sem="relaxed")
    for t in tl.static_range(CHUNK // TILE):
        tcols = start + t * TILE + tl.arange(0, TILE)
        ttake = (tcols < n) & (_load_keys(row_ptr, tcols, n) >= bound.to(tl.int32))
        tslot = slot + tl.cumsum(ttake.to(tl.int32), axis=0) - 1
        tl.store(row_cands_ptr + tslot, tcols, mask=ttake & (tslot < CANDIDATES))
        slot += tl.sum(ttake.to(tl.int32), axis=0)

'''


def _reload(tile):
    def sub(src):
        assert COLLECT_OLD in src
        src = src.replace(COLLECT_OLD, f"""        _append_reloaded(
            counts_ptr + row, row_ptr, row_cands_ptr, chunk * CHUNK, n, bound, CHUNK, CANDIDATES, {tile}
        )
""")
        anchor = "\n@triton.jit\ndef _wait_for("
        assert anchor in src
        return src.replace(anchor, COLLECT_FN + anchor)
    return sub


VARIANTS["reload256"] = [_reload(256)]
VARIANTS["reload512"] = [_reload(512)]


def load(name):
    src = SRC
    for sub in VARIANTS[name]:
        src = sub(src)
    path = os.path.join(os.path.dirname(__file__), "..", "kernels", f"_v_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    try:
        return importlib.import_module(f"kernels._v_{name}")
    finally:
        os.remove(path)

ATOMIC_FN = '''
@triton.jit
def _append_each(count_ptr, row_cands_ptr, cols, keys, n, bound, CANDIDATES: tl.constexpr):
    """_append_candidates with one atomic per appended column instead of a prefix sum over the
    chunk: a few percent of a chunk's keys pass, and the chunk-wide scan is most of the
    launch's instructions."""
    take = (cols < n) & (keys >= bound.to(tl.int32))
    slot = tl.atomic_add(count_ptr + tl.zeros_like(cols), 1, mask=take, sem="relaxed")
    tl.store(row_cands_ptr + slot, cols, mask=take & (slot < CANDIDATES))

'''


def _atomic(src):
    assert COLLECT_OLD in src
    src = src.replace(COLLECT_OLD, """        cols = chunk * CHUNK + tl.arange(0, CHUNK)
        keys = _load_keys(row_ptr, cols, n)
        _append_each(counts_ptr + row, row_cands_ptr, cols, keys, n, bound, CANDIDATES)
""")
    anchor = "\n@triton.jit\ndef _wait_for("
    assert anchor in src
    return src.replace(anchor, ATOMIC_FN + anchor)


VARIANTS["atomic"] = [_atomic]

# -- sampled bound: the bound launch reads one full chunk in STRIDE, each bounding its chunk at
# the key with 1.5 k / (full chunks) keys at or above it; the row's bound (their minimum) then
# has about 1.5 k keys at or above it in well-mixed rows, but no longer surely k: a row whose
# list holds fewer than k is streamed, as an overflowing one is.
BOUND_OLD = """        full, share = _keys_per_full_chunk(n, k, CHUNK)
        if chunk < full:
            cols = chunk * CHUNK + tl.arange(0, CHUNK)
            keys = _load_keys(logits_ptr + row.to(tl.int64) * stride_logits_row, cols, n)
            bound = _chunk_bound(keys, share, CHUNK, GROUP)
            tl.store(bounds_ptr + row.to(tl.int64) * tl.num_programs(1) + chunk, bound)
"""
BOUND_NEW = """        sampled, share = _sampled_chunks(n, k, CHUNK)
        if chunk < sampled:
            cols = chunk * _SAMPLE_STRIDE * CHUNK + tl.arange(0, CHUNK)
            keys = _load_keys(logits_ptr + row.to(tl.int64) * stride_logits_row, cols, n)
            bound = _chunk_bound(keys, share, CHUNK, GROUP)
            tl.store(bounds_ptr + row.to(tl.int64) * tl.cdiv(num_cols, CHUNK) + chunk, bound)
"""
ROWB_OLD = """    full, share = _keys_per_full_chunk(n, k, CHUNK)
    bound = tl.full((), _KEY_MAX, tl.int32)"""
ROWB_NEW = """    full, share = _sampled_chunks(n, k, CHUNK)
    bound = tl.full((), _KEY_MAX, tl.int32)"""
SAMPLE_FN = '''
@triton.jit
def _sampled_chunks(n, k, CHUNK: tl.constexpr):
    full = n // CHUNK
    share = tl.cdiv(3 * k, 2 * tl.maximum(full, 1))
    usable = (full > 0) & (share <= CHUNK)
    return tl.where(usable, tl.cdiv(full, _SAMPLE_STRIDE), 0), tl.where(usable, share, 0)

'''
FINISH_OLD = "    if num_cands <= CANDIDATES:  # every key >= the k-th largest is in the list"
FINISH_NEW = "    if (num_cands <= CANDIDATES) & (num_cands >= k):"
GRID_OLD = """        KernelLaunch(
            _split_bound_kernel,
            grid,"""
GRID_NEW = """        KernelLaunch(
            _split_bound_kernel,
            (rows, cdiv(nchunks, _SAMPLE_STRIDE.value)),"""


def _sample(stride):
    def sub(src):
        for old, new in ((BOUND_OLD, BOUND_NEW), (ROWB_OLD, ROWB_NEW), (FINISH_OLD, FINISH_NEW),
                         (GRID_OLD, GRID_NEW)):
            assert src.count(old) == 1, old
            src = src.replace(old, new)
        anchor = "\n@triton.jit\ndef _lower_bound_of("
        assert anchor in src
        src = src.replace(anchor, f"\n_SAMPLE_STRIDE = tl.constexpr({stride})\n" + SAMPLE_FN + anchor)
        return src
    return sub


VARIANTS["sample2"] = [_sample(2)]
VARIANTS["sample4"] = [_sample(4)]
VARIANTS["sample1"] = [_sample(1)]


def _no_underflow_check(src):
    assert FINISH_NEW in src
    return src.replace(FINISH_NEW, FINISH_OLD)


VARIANTS["sample4_nofallback"] = [_sample(4), _no_underflow_check]  # must fail the boost case

SCAN2D_FN = '''
@triton.jit
def _append_2d(count_ptr, row_cands_ptr, cols, keys, n, bound, CANDIDATES: tl.constexpr):
    """_append_candidates over a chunk laid out as rows of WIDTH consecutive keys: a prefix sum
    along each short row plus one over the rows' counts, instead of one over the whole chunk."""
    take = ((cols < n) & (keys >= bound.to(tl.int32))).to(tl.int32)
    within = tl.cumsum(take, axis=1)
    per_row = tl.sum(take, axis=1)
    before = tl.cumsum(per_row, axis=0) - per_row
    first = tl.atomic_add(count_ptr, tl.sum(per_row, axis=0), sem="relaxed")
    slot = first + before[:, None] + within - 1
    tl.store(row_cands_ptr + slot, cols, mask=(take != 0) & (slot < CANDIDATES))

'''


def _scan2d(width):
    def sub(src):
        assert COLLECT_OLD in src
        src = src.replace(COLLECT_OLD, f"""        cols = chunk * CHUNK + (
            tl.arange(0, CHUNK // {width})[:, None] * {width} + tl.arange(0, {width})[None, :]
        )
        keys = _load_keys(row_ptr, cols, n)
        _append_2d(counts_ptr + row, row_cands_ptr, cols, keys, n, bound, CANDIDATES)
""")
        anchor = "\n@triton.jit\ndef _wait_for("
        assert anchor in src
        return src.replace(anchor, SCAN2D_FN + anchor)
    return sub


for _w in (8, 16, 32, 64, 128):
    VARIANTS[f"scan2d_{_w}"] = [_scan2d(_w)]
VARIANTS["s4_scan16"] = [_sample(4), _scan2d(16)]
VARIANTS["s2_scan16"] = [_sample(2), _scan2d(16)]

# -- against the tree with _append_by_rows: the chunk-wide prefix sum it replaced, and rows of 32
BY_ROWS_CALL = """        # the chunk as rows of _APPEND_ROW consecutive keys (see _append_by_rows)
        cols = chunk * CHUNK + (
            tl.arange(0, CHUNK // _APPEND_ROW)[:, None] * _APPEND_ROW
            + tl.arange(0, _APPEND_ROW)[None, :]
        )
        keys = _load_keys(row_ptr, cols, n)
        _append_by_rows(counts_ptr + row, row_cands_ptr, cols, keys, n, bound, CANDIDATES)
"""


def _prefix1d(src):
    assert BY_ROWS_CALL in src
    return src.replace(BY_ROWS_CALL, COLLECT_OLD)


def _rows(width):
    def sub(src):
        old = "_APPEND_ROW = tl.constexpr(16)"
        assert old in src
        return src.replace(old, f"_APPEND_ROW = tl.constexpr({width})")
    return sub


VARIANTS["prefix1d"] = [_prefix1d]
VARIANTS["rows32"] = [_rows(32)]
VARIANTS["rows8"] = [_rows(8)]


# -- the coop launch's append as rows of 16 (the split collect's _append_by_rows, with keys)
COOP_APPEND_OLD = """            _append_candidates(
                state + 2, row_cands_ptr, row_cand_keys_ptr, cols, keys, n, bound, CANDIDATES, True
            )
"""
COOP_ROWS_FN = '''
@triton.jit
def _append_rows_keyed(count_ptr, row_cands_ptr, row_cand_keys_ptr, row_ptr, start, keys, n, bound,
                       CHUNK: tl.constexpr, CANDIDATES: tl.constexpr, RELOAD: tl.constexpr):
    cols = start + (tl.arange(0, CHUNK // _APPEND_ROW)[:, None] * _APPEND_ROW
                    + tl.arange(0, _APPEND_ROW)[None, :])
    if RELOAD:
        keys2 = _load_keys(row_ptr, cols, n)
    else:
        keys2 = tl.reshape(keys, (CHUNK // _APPEND_ROW, _APPEND_ROW))
    take = ((cols < n) & (keys2 >= bound.to(tl.int32))).to(tl.int32)
    per_row = tl.sum(take, axis=1)
    first = tl.atomic_add(count_ptr, tl.sum(per_row, axis=0), sem="relaxed")
    before = tl.cumsum(per_row, axis=0) - per_row
    slot = first + before[:, None] + tl.cumsum(take, axis=1) - 1
    mask = (take != 0) & (slot < CANDIDATES)
    tl.store(row_cands_ptr + slot, cols, mask=mask)
    tl.store(row_cand_keys_ptr + slot, keys2, mask=mask)

'''


def _coop_rows(reload):
    def sub(src):
        assert src.count(COOP_APPEND_OLD) == 1
        src = src.replace(COOP_APPEND_OLD, f"""            _append_rows_keyed(
                state + 2, row_cands_ptr, row_cand_keys_ptr, row_ptr, chunk * CHUNK, keys, n, bound,
                CHUNK, CANDIDATES, {reload}
            )
""")
        anchor = "\n@triton.jit\ndef _wait_for("
        assert anchor in src
        return src.replace(anchor, COOP_ROWS_FN + anchor)
    return sub


VARIANTS["coop_rows"] = [_coop_rows(False)]
VARIANTS["coop_reload"] = [_coop_rows(True)]
