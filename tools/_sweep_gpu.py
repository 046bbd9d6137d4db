"""Run the envelope sweep on the GPU with Triton's compilation listener counting.

Uses only Triton's own cache lookup: the caller sets TRITON_CACHE_DIR (and nothing else);
this process never installs qsa_warmup's cache manager or hook. Prints one JSON line.
"""

import json
import sys
import time

import torch
from triton import knobs

sys.path.insert(0, ".")
from qsa_warmup.qsa.config import load_config  # noqa: E402  (config and sweep inputs only)
from qsa_warmup.qsa.trace import Inputs, sweep_envelope  # noqa: E402

events = {"compiled": 0, "hits": 0, "names": []}


def listener(*, src, metadata, metadata_group, times, cache_hit):
    events["hits" if cache_hit else "compiled"] += 1
    if not cache_hit:
        events["names"].append(metadata.get("name"))


knobs.compilation.listener = listener
cfg = load_config(preset=sys.argv[1] if len(sys.argv) > 1 else "default")
calls = {"n": 0}


def run(op, *args, **kwargs):
    calls["n"] += 1
    op(*args, **kwargs)


start = time.perf_counter()
sweep_envelope(
    cfg,
    run,
    seed=int(sys.argv[2]) if len(sys.argv) > 2 else 1,
    inputs=Inputs("cuda", realistic=True, num_blocks=4096, seed=0),
)
torch.cuda.synchronize()
print(
    json.dumps(
        {
            "launcher_calls": calls["n"],
            "compiles": events["compiled"],
            "cache_hits": events["hits"],
            "compiled_kernels": sorted(set(events["names"])),
            "seconds": time.perf_counter() - start,
            "cache_dir": knobs.cache.dir,
        }
    )
)
