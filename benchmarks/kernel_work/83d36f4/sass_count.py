"""Offline (no GPU): static SASS of the split launches for sm_90 (no loops in a chunk's scan, so
the static count is what each program issues), tree beside variants. Usage:
python3 scratch/sass_count.py [VARIANTS]"""
import collections, os, subprocess, sys, tempfile
sys.path.insert(0, "."); sys.path.insert(0, "scratch")
import torch, triton
from triton.backends.compiler import GPUTarget
from qsa_warmup.triton_compat.targets import active_driver
import kernels.topk as TREE
import topk_variants as V
BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
def sass(compiled):
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    text = subprocess.run([f"{BIN}/cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout
    ops = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("/*") and "*/" in line:
            body = line.split("*/", 1)[1].strip().rstrip(";").strip()
            if not body or body.startswith("/*"):
                continue
            if body.startswith("@"):
                body = body.split(None, 1)[1]
            ops.append(body.split()[0].split(".")[0])
    return ops
names = sys.argv[1:]
mods = {"tree": TREE, **{n: V.load(n) for n in names}}
for rows, cols, k in [(4096, 32768, 512), (256, 8192, 512), (64, 32768, 512)]:
    for name, T in mods.items():
        logits = torch.empty(rows, cols); lengths = torch.empty(rows, dtype=torch.int32)
        out = torch.empty(rows, k, dtype=torch.int32)
        with active_driver(GPUTarget("cuda", 90, 32)):
            cfg = T.topk_launch_config(cols, k, rows)
            ws = T.allocate_workspace(logits, T.workspace_sizes(rows, cols, cfg))
            for l in T._split_launches(logits, lengths, k, out, cfg, ws):
                c = l.warmup()
                ops = sass(c)
                top = collections.Counter(ops).most_common(12)
                print(f"{rows}x{cols} {name:9s} {l.kernel.fn.__name__:22s} w={l.options['num_warps']} sass={len(ops)} " + " ".join(f"{o}:{n}" for o, n in top), flush=True)
