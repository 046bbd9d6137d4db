"""CPU interpreter: every variant exact on ragged, rounded and constant rows, split and coop."""
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "."); sys.path.insert(0, "scratch"); sys.path.insert(0, "tests")
import torch
import topk_variants as V
from _helpers import assert_topk_matches
names = sys.argv[1:] or list(V.VARIANTS)
for name in names:
    T = V.load(name)
    for rows, cols, k, kind in [(3, 20000, 64, "normal"), (5, 12000, 100, "rounded"), (2, 9000, 50, "const"), (300, 5000, 40, "normal")]:
        g = torch.Generator().manual_seed(rows * cols)
        x = torch.randn(rows, cols, generator=g)
        if kind == "rounded": x = x.round(decimals=1)
        if kind == "const": x = torch.full((rows, cols), 0.5)
        n = torch.randint(k + 1, cols + 1, (rows,), generator=g).to(torch.int32); n[0] = cols
        out = torch.full((rows, k), -7, dtype=torch.int32)
        T.ragged_topk(x, n, k, out)
        assert_topk_matches(out, x, n, k)
        print(name, rows, cols, k, kind, T.topk_launch_config(cols, k, rows).path, "exact", flush=True)
