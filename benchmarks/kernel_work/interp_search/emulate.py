"""CPU emulation: dependent steps of the split top-k's searches, even five-way / halving (as
kernels/topk.py) against interpolation-guided thresholds. Keys as kernels/topk.py _order_keys."""
import numpy as np, sys

def keys_of(x):
    b = x.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(b < 0, b ^ 0x7FFFFFFF, b)

def rows(kind, n, cols, rng):
    if kind == "normal":
        return rng.standard_normal((n, cols)).astype(np.float32)
    if kind == "relu8":  # relu-summed over 8 heads, weighted
        s = np.zeros((n, cols), np.float32)
        for h in range(8):
            s += rng.uniform(0.5, 1.5) * np.maximum(rng.standard_normal((n, cols)), 0)
        return s
    if kind == "uniform":
        return rng.random((n, cols), dtype=np.float32)
    if kind == "rounded":
        return np.round(rng.standard_normal((n, cols)) * 8).astype(np.float32) / 8
    raise ValueError(kind)

def five_even(keys, need, low, high, at_low, at_high):
    step = max((high - low + 4) // 5, 1)
    return [min(low + i * step, high - 1) for i in (1, 2, 3, 4)]

def five_interp(keys, need, low, high, at_low, at_high, state):
    span = high - low
    if state.get("even") or at_low == at_high:
        state["even"] = False
        return five_even(keys, need, low, high, at_low, at_high)
    est = low + (at_low - need) * span // max(at_low - at_high, 1)
    w = max(1, span // state.get("div", 16))
    ts = [est - 2 * w, est - w // 2, est + w // 2, est + 2 * w]
    return [min(max(t, low + 1), high - 1) for t in ts]

def search(keys, need, low, high, at_low, at_high, chooser, stop, max_steps=64):
    state = {}
    steps = 0
    while (high - low > 1) and not stop(at_low) and steps < max_steps:
        old = high - low
        ts = sorted(set(chooser(keys, need, low, high, at_low, at_high, state)))
        cs = [int((keys >= t).sum()) for t in ts]
        nl, nh, al, ah = low, high, at_low, at_high
        for t, c in zip(ts, cs):
            if c >= need:
                nl, al = t, c
            else:
                nh, ah = t, c
                break
        low, high, at_low, at_high = nl, nh, al, ah
        if (high - low) * 4 > old:  # shrank less than 4x: next step even
            state["even"] = True
        steps += 1
    return steps, low, at_low

def chooser_interp(div):
    def f(keys, need, low, high, at_low, at_high, state):
        state["div"] = div
        return five_interp(keys, need, low, high, at_low, at_high, state)
    return f

def halving(keys, need, low, high, at_low, at_high, state):
    return [(low + high) >> 1]

def interp1(keys, need, low, high, at_low, at_high, state):
    """one threshold a step: interpolated, safeguarded by halving"""
    if state.get("even") or at_low == at_high:
        state["even"] = False
        return [(low + high) >> 1]
    est = low + (at_low - need) * (high - low) // max(at_low - at_high, 1)
    return [min(max(est, low + 1), high - 1)]

def main():
    rng = np.random.default_rng(0)
    k = 512
    for kind in ("relu8", "normal", "uniform", "rounded"):
        for cols, chunk in ((32768, 4096), (8192, 2048)):
            x = rows(kind, 64, cols, rng)
            res = {}
            for r in range(x.shape[0]):
                kk = keys_of(x[r])
                # bound search per chunk over group maxima (group 8 at 4096, 4 at 2048 as _split_group)
                full = cols // chunk
                share = -(-k // full)
                group = 8 if chunk == 4096 else 4
                bounds = []
                for c in range(full):
                    v = kk[c * chunk:(c + 1) * chunk].reshape(-1, group).max(axis=1)
                    lo, hi = int(v.min()), int(v.max()) + 1
                    stop_slack = lambda a, s=share: a <= s + s // 4
                    for name, ch in (("bound.halve", halving), ("bound.interp1", interp1)):
                        st, b, _ = search(v, share, lo, hi, len(v), 0, ch, stop_slack, 16)
                        res.setdefault(name, []).append(st)
                        if name == "bound.halve":
                            bounds.append(b)
                bound = min(bounds)
                cands = kk[kk >= bound]
                res.setdefault("candidates", []).append(len(cands))
                hi = int(cands.max()) + 1
                stop_k = lambda a: a == k
                for name, ch in (("finish.even5", five_even_c), ("finish.interp5/16", chooser_interp(16)),
                                 ("finish.interp5/64", chooser_interp(64)), ("finish.interp1", interp1)):
                    st, t, al = search(cands, k, bound, hi, len(cands), 0, ch, stop_k)
                    # exactness: threshold has >= k at or above, fewer above
                    assert (cands >= t).sum() >= k and (cands > t).sum() < k or al == k
                    res.setdefault(name, []).append(st)
            summary = {n: (round(float(np.mean(v)), 2), int(np.max(v))) for n, v in res.items()}
            print(kind, cols, summary, flush=True)

def five_even_c(keys, need, low, high, at_low, at_high, state):
    return five_even(keys, need, low, high, at_low, at_high)

main()
