import numpy as np
def keys(v):
    b = v.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(b < 0, b ^ 0x7FFFFFFF, b)
rng = np.random.default_rng(1)
def unkey(kk):
    kk = np.int64(kk); b = kk ^ 0x7FFFFFFF if kk < 0 else kk
    return np.array([b], dtype=np.int64).astype(np.int32).view(np.float32)[0]
def search(v, need, rule, slack=None, STEPS=99):
    lo, hi = v.min(), v.max() + 1; at_lo = len(v); s = 0; ok_last = True
    if rule == "keyfull":  # the one-program search before: the whole int32 range, halved
        lo, hi, rule = -2**31, 2**31, "key"
    stop = (lambda a: a <= need + need // slack) if slack else (lambda a: a == need)
    while s < STEPS and hi - lo > 1 and not stop(at_lo):
        lv, hv = np.float64(unkey(lo)), np.float64(unkey(hi - 1))
        km = (lo + hi) >> 1; vm = keys(np.array([lv / 2 + hv / 2]))[0]
        wide = (lv > 0 and hv > 4 * lv) or (hv < 0 and lv < 4 * hv)
        if rule == "key": use_v = False
        elif rule == "value": use_v = True
        elif rule == "adapt": use_v = ok_last
        elif rule == "adapt2": use_v = ok_last or not wide
        elif rule == "wide": use_v = not wide
        m = vm if use_v else km
        mid = m if lo < m < hi else km
        c = (v >= mid).sum()
        if c >= need: lo, at_lo = mid, c
        else: hi = mid
        ok_last = c >= need; s += 1
    return s
def relu_sum(n):
    return np.maximum(rng.standard_normal((8, n)), 0).T @ rng.random(8)
gens = (("uniform", lambda n: rng.random(n)), ("normal", lambda n: rng.standard_normal(n)), ("relu8", relu_sum), ("round2", lambda n: np.round(rng.standard_normal(n), 2)), ("lognormal", lambda n: np.exp(3*rng.standard_normal(n))), ("neg", lambda n: -rng.random(n)-5), ("relu1", lambda n: np.maximum(rng.standard_normal(n), 0)))
rules = ("keyfull", "key", "value", "adapt", "adapt2", "wide")
print("""Cuts a search takes. keyfull: halvings of the int32 key range (the one-program search
before); key: halvings of [min, max]; value: halfway between the values; adapt: value, but key
after an overshoot; adapt2 (kernels.topk._cut): value, but key after an overshoot on a range of
one sign spanning over 4x; wide: key on such ranges always. Mean over draws.""")
print("single (exact k) over [min, max]:", rules)
for name, gen in gens:
    for n, k in ((2048, 512), (8192, 512)):
        R = 30; res = np.zeros(len(rules))
        for _ in range(R):
            v = keys(gen(n)); res += [search(v, k, r) for r in rules]
        print(f"{name:9} {n:5} {k:4}", np.round(res / R, 1))
print("chunk bounds (group maxima, slack 4, at most 16 cuts):", rules[1:])
for name, gen in gens:
    for chunk, share, g in ((512, 32, 1), (2048, 128, 1), (4096, 64, 8)):
        R = 60; res = np.zeros(len(rules) - 1)
        for _ in range(R):
            v = keys(gen(chunk)).reshape(-1, g).max(1); res += [search(v, share, r, 4, 16) for r in rules[1:]]
        print(f"{name:9} {chunk:5} {share:4} g{g}", np.round(res / R, 1))
