"""Numpy: chunk-bound bisection steps (early exit) and the row's candidates, by _BOUND_STEPS."""
import numpy as np
from steps_sim import keys_of
def lower_bound(vals, need, steps):
    low, high, at_low, s = vals.min(), vals.max() + 1, len(vals), 0
    while s < steps and at_low != need:
        mid = (low + high) >> 1; c = (vals >= mid).sum()
        if c >= need: low, at_low = mid, c
        else: high = mid
        s += 1
    return low, s
rng = np.random.default_rng(1)
for cols, chunk, group, k in ((32768, 2048, 8, 512), (32768, 4096, 8, 512), (16384, 1024, 8, 512)):
    full = cols // chunk; share = -(-k // full)
    for steps in (6, 8, 11, 16):
        used, cands = [], []
        for t in range(100):
            kk = keys_of(rng.standard_normal(cols)).reshape(full, chunk)
            gm = kk.reshape(full, chunk // group, group).max(axis=2)
            if share * 4 > chunk // group:
                gm = kk  # searches every key
            bs = [lower_bound(g, share, steps) for g in gm]
            used.append(np.mean([s for _, s in bs])); cands.append((kk >= min(b for b, _ in bs)).sum())
        print(f"{cols}x c{chunk} share {share} steps<={steps}: steps used {np.mean(used):.1f}, candidates mean {np.mean(cands):.0f} max {max(cands)}")

def lower_bound5(vals, need, steps):
    low, high, at_low, s = vals.min(), vals.max() + 1, len(vals), 0
    while s < steps and at_low != need and high - low > 1:
        step = max((high - low + 4) // 5, 1)
        ts = [min(low + i * step, high - 1) for i in range(1, 5)]
        cs = [(vals >= t).sum() for t in ts]
        nh = ts[0]
        for i in range(4):
            if cs[i] >= need:
                low, at_low = ts[i], cs[i]; nh = ts[i + 1] if i < 3 else high
        high = nh; s += 1
    return low, s
print("five-way bound")
for cols, chunk, group, k in ((32768, 2048, 8, 512), (32768, 4096, 8, 512), (16384, 1024, 8, 512)):
    full = cols // chunk; share = -(-k // full)
    for steps in (5, 6, 7, 8):
        used, cands = [], []
        for t in range(100):
            kk = keys_of(rng.standard_normal(cols)).reshape(full, chunk)
            gm = kk.reshape(full, chunk // group, group).max(axis=2)
            if share * 4 > chunk // group:
                gm = kk
            bs = [lower_bound5(g, share, steps) for g in gm]
            used.append(np.mean([s for _, s in bs])); cands.append((kk >= min(b for b, _ in bs)).sum())
        print(f"{cols}x c{chunk} share {share} steps<={steps}: steps used {np.mean(used):.1f}, candidates mean {np.mean(cands):.0f} max {max(cands)}")
