import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "."); sys.path.insert(0, "scratch"); sys.path.insert(0, "tests")
import torch
import topk_variants as V
from _helpers import assert_topk_matches
for name in sys.argv[1:]:
    T = V.load(name)
    for rows, cols, k, kind in [(64, 20000, 64, "normal"), (40, 12000, 100, "rounded"), (300, 5000, 40, "const"), (40, 9000, 50, "const"), (260, 4500, 30, "rounded")]:
        g = torch.Generator().manual_seed(rows * cols)
        x = torch.randn(rows, cols, generator=g)
        if kind == "rounded": x = x.round(decimals=1)
        if kind == "const": x = torch.full((rows, cols), 0.5)
        n = torch.randint(k + 1, cols + 1, (rows,), generator=g).to(torch.int32); n[0] = cols
        n[1] = k - 3  # a short row
        out = torch.full((rows, k), -7, dtype=torch.int32)
        T.ragged_topk(x, n, k, out)
        assert_topk_matches(out, x, n, k)
        cfg = T.topk_launch_config(cols, k, rows)
        print(name, rows, cols, k, kind, cfg.path, cfg.finish_apart if hasattr(cfg, "finish_apart") else "", "exact", flush=True)
