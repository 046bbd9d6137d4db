"""GPU: rows whose candidates overflow the list, before (3bfb0a0: such a row is streamed) and
now (a row that fits the list's reserve is finished by streaming the list), at shapes where
the CPU emulation overflows lists (wide rows, k near 1.5x a power of two) and where it does not,
CUDA graphs, normal and relu-summed logits, every result exact; rows over the list counted."""
import importlib, os, shutil, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
from bench_kernels import graph_bench
import kernels.topk as NOW
shutil.copy("benchmarks/kernel_work/list_reserve/topk_3bfb0a0.py", "kernels/_v_before.py")
try:
    BEFORE = importlib.import_module("kernels._v_before")
finally:
    os.remove("kernels/_v_before.py")

for rows, cols, k in ((256, 131072, 2730), (256, 131072, 2400), (1024, 131072, 2048), (64, 131072, 2048),
                      (256, 32768, 1365), (1024, 32768, 1365), (64, 32768, 512), (4096, 32768, 512)):
    for dist in ("normal", "relu8"):
        torch.manual_seed(rows + cols + k)
        if dist == "normal":
            x = torch.randn(rows, cols, device="cuda")
        else:
            x = torch.zeros(rows, cols, device="cuda")
            for _ in range(8):
                x += torch.randn(rows, cols, device="cuda").relu_()
        n = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        want = x.topk(k, dim=1).values
        line = f"{rows:>5}x{cols:<6} k={k:<5} {dist:<6}"
        for name, mod in (("before", BEFORE), ("now", NOW)):
            cfg = mod.topk_launch_config(cols, k, rows)
            out = torch.full((rows, k), -7, dtype=torch.int32, device="cuda")
            launches = mod.ragged_topk_launches(x, n, k, out)
            run = lambda: [l.run() for l in launches]
            run(); torch.cuda.synchronize()
            ok = torch.equal(x.gather(1, out.long().clamp(min=0)).sort(1, descending=True).values, want)
            over = int((launches[0].args[2][:rows] > cfg.candidates).sum()) if cfg.path == "split" else -1
            us = graph_bench(run) * 1e3
            line += f" | {name} {us:8.1f} us ({cfg.path}, list {cfg.candidates}, rows over {over}){'' if ok else ' WRONG'}"
        print(line, flush=True)
