"""Numpy: chunk-bound searches (early exit) and the row's candidates, by their step cap: the
bisection of _lower_bound_of, and the five-way step of steps_sim.py."""
import numpy as np
from steps_sim import five, keys_of


def lower_bound(vals, need, steps):
    low, high, at_low, s = vals.min(), vals.max() + 1, len(vals), 0
    while s < steps and at_low != need:
        mid = (low + high) >> 1; c = (vals >= mid).sum()
        if c >= need: low, at_low = mid, c
        else: high = mid
        s += 1
    return low, s


def lower_bound5(vals, need, steps):
    low, high, at_low, s = vals.min(), vals.max() + 1, len(vals), 0
    while s < steps and at_low != need and high - low > 1:
        low, high, at_low, _ = five(vals, need, low, high, at_low, 0, False); s += 1
    return low, s


def sweep(search, caps):
    for cols, chunk, group, k in ((32768, 2048, 8, 512), (32768, 4096, 8, 512), (16384, 1024, 8, 512)):
        full = cols // chunk; share = -(-k // full)
        for steps in caps:
            used, cands = [], []
            for t in range(100):
                kk = keys_of(rng.standard_normal(cols)).reshape(full, chunk)
                gm = kk.reshape(full, chunk // group, group).max(axis=2)
                if share * 4 > chunk // group:
                    gm = kk  # searches every key
                bs = [search(g, share, steps) for g in gm]
                used.append(np.mean([s for _, s in bs])); cands.append((kk >= min(b for b, _ in bs)).sum())
            print(f"{cols}x c{chunk} share {share} steps<={steps}: steps used {np.mean(used):.1f}, candidates mean {np.mean(cands):.0f} max {max(cands)}")


rng = np.random.default_rng(1)
sweep(lower_bound, (6, 8, 11, 16))
print("five-way bound")
sweep(lower_bound5, (5, 6, 7, 8))
