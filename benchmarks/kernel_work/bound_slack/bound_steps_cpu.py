"""CPU: candidates per row the split / coop top-k gathers when each chunk's bound takes at most
S halvings (_BOUND_STEPS), emulating _chunk_bound / _lower_bound_of in torch (groups of
consecutive keys; the kernel lets the compiler choose the grouping), for several logit
distributions; against the candidate list's capacity (a row over it is streamed)."""
import math
import torch
from kernels.topk import topk_launch_config, SPLIT_GROUPS_PER_KEY

def order_keys(x):
    b = x.contiguous().view(torch.int32).to(torch.int64)
    return b ^ ((b >> 31) & 0x7FFFFFFF)

STEPS_TAKEN = []

def lower_bound(vals, need, steps, slack=0):  # vals [m, g] int64, need [m]
    low = vals.min(1).values; high = vals.max(1).values + 1
    at_low = torch.full_like(low, vals.shape[1])
    taken = torch.zeros_like(low)
    for _ in range(steps):
        active = (at_low < need) | (at_low > need + slack)
        taken += active
        if not active.any():
            break
        mid = (low + high) >> 1
        cnt = (vals >= mid[:, None]).sum(1)
        enough = cnt >= need
        upd = active & enough
        low = torch.where(upd, mid, low); at_low = torch.where(upd, cnt, at_low)
        high = torch.where(active & ~enough, mid, high)
    STEPS_TAKEN.append(taken.float().mean().item())
    return low

def candidates(x, k, steps, rows_cfg, slack_div=0):
    rows, cols = x.shape
    cfg = topk_launch_config(cols, k, rows_cfg)
    chunk, group = cfg.block, cfg.group
    keys = order_keys(x)
    full = cols // chunk
    share = math.ceil(k / full)
    ch = keys[:, : full * chunk].reshape(rows * full, chunk)
    if group > 1 and share * SPLIT_GROUPS_PER_KEY <= chunk // group:
        ch = ch.reshape(rows * full, chunk // group, group).max(2).values
    need = torch.full((rows * full,), share, dtype=torch.int64)
    b = lower_bound(ch, need, steps, share // slack_div if slack_div else 0).reshape(rows, full).min(1).values
    return (keys >= b[:, None]).sum(1), cfg.candidates

dists = {
    "normal": lambda r, c: torch.randn(r, c),
    "uniform": lambda r, c: torch.rand(r, c),
    "relu-sum (32 heads)": lambda r, c: torch.relu(torch.randn(r, c, 32)).sum(2),
    "exponential": lambda r, c: torch.empty(r, c).exponential_(),
    "normal + 1e30 outlier": lambda r, c: torch.randn(r, c).index_put_((torch.arange(r), torch.zeros(r, dtype=torch.long)), torch.tensor(1e30)),
    "normal, -1e30 and 1e30": lambda r, c: torch.randn(r, c).index_put_((torch.arange(r), torch.zeros(r, dtype=torch.long)), torch.tensor(1e30)).index_put_((torch.arange(r), torch.ones(r, dtype=torch.long)), torch.tensor(-1e30)),
    "rounded normal": lambda r, c: torch.randn(r, c).round(decimals=2),
    "normal, +-1e38 every 1024": lambda r, c: torch.randn(r, c).index_fill_(1, torch.arange(0, c, 1024), 1e38).index_fill_(1, torch.arange(1, c, 1024), -1e38),
}
torch.manual_seed(0)
for rows, cols, k in ((64, 32768, 512), (256, 8192, 512), (64, 131072, 2048), (8, 65536, 2048), (8, 32768, 512), (1, 16384, 512)):
    r = min(rows, 64)
    for name, make in dists.items():
        x = make(r, cols).float()
        line = []
        for steps, sd in ((12, 0), (16, 0), (16, 8), (16, 4)):
            STEPS_TAKEN.clear()
            c, cap = candidates(x, k, steps, rows, sd)
            line.append(f"S{steps}{'/'+str(sd) if sd else ''}: {c.float().mean():5.0f} max {int(c.max()):5d} over {int((c > cap).sum())} steps {STEPS_TAKEN[0]:4.1f}")
        print(f"{rows}x{cols} k={k} cap {cap} {name[:14]:14s} " + " | ".join(line), flush=True)
