"""GPU, under ncu: the dispatched ragged_topk at the shapes whose targets are missed, each called
once to compile and once more for the profiler (ncu's --launch-skip skips nothing; every launch
of the second call is what the report's last launches hold). Usage: python3 scratch/ncu_topk.py"""
import sys
import torch
sys.path.insert(0, ".")
from kernels import ragged_topk
import kernels.topk as T

SHAPES = [(64, 32768, 512), (4096, 32768, 512), (256, 8192, 512), (8, 32768, 512)]
for rows, cols, k in SHAPES:
    torch.manual_seed(rows + cols)
    x = torch.randn(rows, cols, device="cuda")
    n = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    for _ in range(2):
        torch.cuda.nvtx.range_push(f"topk {rows}x{cols}")
        ragged_topk(x, n, k, out)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(rows, cols, k, T.topk_launch_config(cols, k, rows), flush=True)
