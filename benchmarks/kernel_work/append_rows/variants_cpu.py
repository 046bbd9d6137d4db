"""CPU interpreter: every variant exact on ragged, rounded and constant rows (constant ones
overflow the candidate list), split fused and apart and coop; the second case list also has a
row shorter than k. Usage, from the repository root with these scripts under scratch/:
python3 scratch/variants_cpu.py [NAMES]"""
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "."); sys.path.insert(0, "scratch"); sys.path.insert(0, "tests")
import torch
import topk_variants as V
from _helpers import assert_topk_matches
CASES = [(3, 20000, 64, "normal", False), (5, 12000, 100, "rounded", False), (2, 9000, 50, "const", False),
         (300, 5000, 40, "normal", False),
         (64, 20000, 64, "normal", True), (40, 12000, 100, "rounded", True), (300, 5000, 40, "const", True),
         (40, 9000, 50, "const", True), (260, 4500, 30, "rounded", True),
         # the top keys all in every fourth chunk of the split path's chunk size
         (4, 20000, 64, "boost", False), (260, 9000, 50, "boost", True)]
for name in sys.argv[1:] or list(V.VARIANTS):
    T = V.load(name)
    for rows, cols, k, kind, short_row in CASES:
        g = torch.Generator().manual_seed(rows * cols)
        x = torch.randn(rows, cols, generator=g)
        if kind == "rounded": x = x.round(decimals=1)
        if kind == "const": x = torch.full((rows, cols), 0.5)
        if kind == "boost":
            chunk = T.topk_launch_config(cols, k, rows).block
            x[:, (torch.arange(cols) // chunk) % 4 == 0] += 10
        n = torch.randint(k + 1, cols + 1, (rows,), generator=g).to(torch.int32); n[0] = cols
        if short_row:
            n[1] = k - 3
        out = torch.full((rows, k), -7, dtype=torch.int32)
        T.ragged_topk(x, n, k, out)
        assert_topk_matches(out, x, n, k)
        print(name, rows, cols, k, kind, "short row" if short_row else "", T.topk_launch_config(cols, k, rows).path, "exact", flush=True)
