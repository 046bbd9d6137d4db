import sys, torch
sys.path.insert(0, "benchmarks/kernel_work/bound_slack"); sys.path.insert(0, ".")
import bound_steps_lib as B
torch.manual_seed(0)
def relu_sum(r, c, h=16):
    x = torch.zeros(r, c)
    for _ in range(h):
        x += torch.randn(r, c).relu_()
    return x
for rows, cols, k in ((256, 32768, 1365), (256, 32768, 1000), (128, 131072, 2730), (128, 131072, 2048), (256, 32768, 512)):
    for name, make in (("normal", lambda r, c: torch.randn(r, c)), ("relu-sum", relu_sum), ("uniform", lambda r, c: torch.rand(r, c))):
        x = make(rows, cols)
        line = []
        for steps, sd in ((16, 0), (16, 8), (16, 4)):
            B.STEPS_TAKEN.clear()
            c, cap = B.candidates(x, k, steps, rows, sd)
            line.append(f"{'S16' if not sd else 'slack/'+str(sd)}: mean {c.float().mean():5.0f} max {int(c.max()):5d} over {int((c > cap).sum())} steps {B.STEPS_TAKEN[0]:4.1f}")
        print(f"{rows}x{cols} k={k} cap {cap} {name:9s} " + " | ".join(line), flush=True)
