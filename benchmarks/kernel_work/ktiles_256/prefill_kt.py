"""GPU: bench_kernels' prefill case (scoring and the whole select, 4 x 2048 new tokens at 128K)
with PREFILL_K_TILES[2] (bf16) at 128, 256, 512, twice in alternation. Usage:
python3 scratch/prefill_kt.py"""
import sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
import kernels.prefill as P
from bench_kernels import prefill_case
for kt in (128, 256, 512, 128, 256, 512):
    P.PREFILL_K_TILES[2] = kt
    r = prefill_case(torch.bfloat16, False)
    print(f"bf16 k_tiles {kt}: scoring {r['scoring_ms']:.3f} ms select {r['select_ms']:.3f} ms "
          f"(config {r['config']['k_tiles']})", flush=True)
