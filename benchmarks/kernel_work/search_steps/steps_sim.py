"""Numpy: finishing-search steps of the five-way and the interpolating five-way over realistic
candidate lists (k = 512, ~650 candidates from a 32K normal row)."""
import numpy as np
def keys_of(v):
    b = v.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(b < 0, b ^ 0x7FFFFFFF, b)
def five(keys, need, low, high, at_low, at_high, interp):
    span = high - low
    if interp:
        est = low + (span * (at_low - need)) // max(at_low - at_high, 1)
        w = span // 16 + 1
        t2 = min(max(est - w, low + 1), high - 1); t3 = min(max(est + w, t2), high - 1)
        t1 = min(max((low + t2) // 2, low + 1), t2); t4 = min(max((t3 + high) // 2, t3), high - 1)
        ts = [t1, t2, t3, t4]
    else:
        step = max((span + 4) // 5, 1); ts = [min(low + i * step, high - 1) for i in range(1, 5)]
    cs = [(keys >= t).sum() for t in ts]
    nl, nh, cl, ch = low, ts[0], at_low, cs[0]
    for i in range(4):
        if cs[i] >= need:
            nl, cl = ts[i], cs[i]; nh = ts[i + 1] if i < 3 else high; ch = cs[i + 1] if i < 3 else at_high
    return nl, nh, cl, ch


def main():
    rng = np.random.default_rng(0)
    for dist in ("normal", "rounded", "uniform"):
        res = {False: [], True: []}
        for trial in range(300):
            v = rng.standard_normal(32768) if dist != "uniform" else rng.random(32768)
            if dist == "rounded": v = np.round(v, 2)
            kk = keys_of(v); srt = np.sort(kk)[::-1]
            bound = srt[int(rng.integers(560, 760))]  # the row bound leaves ~650 candidates
            cand = kk[kk >= bound]
            for interp in (False, True):
                low, high, at_low, at_high, steps = bound, cand.max() + 1, len(cand), 0, 0
                while high - low > 1 and at_low != 512:
                    low, high, at_low, at_high = five(cand, 512, low, high, at_low, at_high, interp); steps += 1
                assert low == srt[511] or (kk >= low).sum() == 512, (low, srt[511])
                res[interp].append(steps)
        print(dist, "five-way steps mean/max", np.mean(res[False]), max(res[False]), "| interp", np.mean(res[True]), max(res[True]))


if __name__ == "__main__":
    main()
