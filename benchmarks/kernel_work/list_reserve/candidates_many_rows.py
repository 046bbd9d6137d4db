import sys, torch
sys.path.insert(0, "benchmarks/kernel_work/bound_slack"); sys.path.insert(0, ".")
import bound_steps_lib as B
torch.manual_seed(1)
for cols, k, rows in ((131072, 2048, 1024), (65536, 2048, 1024), (32768, 1024, 2048), (32768, 512, 2048)):
    x = torch.randn(rows, cols)
    c, cap = B.candidates(x, k, 16, rows, 0)
    print(f"{rows}x{cols} k={k} cap {cap}: mean {c.float().mean() / k:4.2f}k max {int(c.max()) / k:4.2f}k over {int((c > cap).sum())}/{rows}", flush=True)
    del x
