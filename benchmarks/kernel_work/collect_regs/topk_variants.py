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


VARIANTS = {
    "bound5s6": [_bound_five(6)],
    "bound5s7": [_bound_five(7)],
    "bound5s7_interp": [_bound_five(7), _interp],
    "interp": [_interp],
    "bound8": [_bound_steps(8)],
    "bound11": [_bound_steps(11)],
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
