import sys, subprocess, tempfile, os, shutil, importlib
sys.path.insert(0, ".")
import torch, triton
from triton.backends.compiler import GPUTarget
from qsa_warmup.triton_compat.targets import active_driver
import kernels.topk as NOW
shutil.copy("benchmarks/kernel_work/list_reserve/topk_3bfb0a0.py", "kernels/_v_before.py")
BEFORE = importlib.import_module("kernels._v_before"); os.remove("kernels/_v_before.py")
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
def usage(compiled):
    with tempfile.NamedTemporaryFile(suffix=".ptx", delete=False, mode="w") as f:
        f.write(compiled.asm["ptx"])
    out = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", f.name, "-o", "/dev/null"], capture_output=True, text=True).stderr
    return " | ".join(" ".join(l.split()[-8:]) for l in out.splitlines() if "registers" in l or "spill" in l)
with active_driver(GPUTarget("cuda", 90, 32)):
    for rows, cols, k in ((8, 32768, 512), (64, 32768, 512), (256, 8192, 512), (64, 131072, 2048), (4096, 32768, 512), (1, 4096, 512)):
        for name, T in (("before", BEFORE), ("now", NOW)):
            logits = torch.empty(rows, cols); lengths = torch.empty(rows, dtype=torch.int32)
            out = torch.empty(rows, k, dtype=torch.int32)
            ls = T.ragged_topk_launches(logits, lengths, k, out)
            for l in ls:
                opts = dict(l.options)
                if "HALF" in opts: opts["HALF"] = 0
                c = l.kernel.warmup(*l.args, grid=l.grid, **opts)
                print(f"{rows}x{cols} k={k} {name:6s} {l.kernel.fn.__name__:24s} {usage(c)}", flush=True)
