"""Offline (no GPU): registers of the split launches, tree beside the reload variants (ptxas for
sm_90a). Usage: python3 scratch/regs_reload.py"""
import sys, subprocess, tempfile, os
sys.path.insert(0, "."); sys.path.insert(0, "scratch")
import torch, triton
from triton.backends.compiler import GPUTarget
from qsa_warmup.triton_compat.targets import active_driver
import kernels.topk as TREE
import topk_variants as V
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
def usage(compiled):
    with tempfile.NamedTemporaryFile(suffix=".ptx", delete=False, mode="w") as f:
        f.write(compiled.asm["ptx"])
    out = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", f.name, "-o", "/dev/null"], capture_output=True, text=True).stderr
    return " | ".join(l.split("info    :")[-1].strip() for l in out.splitlines() if "registers" in l)
mods = {"tree": TREE, **{n: V.load(n) for n in sys.argv[1:]}}
for rows, cols, k in [(4096, 32768, 512), (64, 32768, 512), (256, 8192, 512), (64, 131072, 2048)]:
    for name, T in mods.items():
        logits = torch.empty(rows, cols); lengths = torch.empty(rows, dtype=torch.int32)
        out = torch.empty(rows, k, dtype=torch.int32)
        with active_driver(GPUTarget("cuda", 90, 32)):
            cfg = T.topk_launch_config(cols, k, rows)
            ws = T.allocate_workspace(logits, T.workspace_sizes(rows, cols, cfg))
            for l in T._split_launches(logits, lengths, k, out, cfg, ws):
                if "collect" in l.kernel.fn.__name__:
                    print(f"{rows}x{cols} k={k} {name:10s} {l.kernel.fn.__name__} warps={l.options['num_warps']} chunk={l.options['CHUNK']} {usage(l.warmup())}", flush=True)
