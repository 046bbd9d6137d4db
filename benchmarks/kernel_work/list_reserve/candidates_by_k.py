import sys, torch
sys.path.insert(0, "benchmarks/kernel_work/bound_slack"); sys.path.insert(0, ".")
import bound_steps_lib as B
from kernels import topk_launch_config
torch.manual_seed(0)
def relu_sum(r, c, h=16):
    x = torch.zeros(r, c)
    for _ in range(h):
        x += torch.randn(r, c).relu_()
    return x
for cols, ks in ((32768, (1024, 1100, 1150, 1200, 1250, 1300, 1365)), (131072, (2048, 2200, 2300, 2400, 2500, 2600, 2730))):
    xs = {"normal": torch.randn(256, cols), "relu-sum": relu_sum(256, cols)}
    for k in ks:
        line = []
        for name, x in xs.items():
            B.STEPS_TAKEN.clear()
            c, cap = B.candidates(x, k, 16, 256, 0)
            line.append(f"{name}: mean {c.float().mean() / k:4.2f}k max {int(c.max()) / k:4.2f}k over {int((c > cap).sum()):3d}/256")
        cfg = topk_launch_config(cols, k, 256)
        print(f"{cols} k={k} cap {cap} ({cap / k:4.2f}k) finish_warps {cfg.finish_warps} | " + " | ".join(line), flush=True)
