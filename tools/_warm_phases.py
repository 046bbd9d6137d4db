"""Where a warm start of the hook spends its time on this machine (GPU or offline target).

Fresh process, kernels imported; prints one JSON line: total, the hook's phases, whether the
hook imported ``triton.experimental.gluon`` (Triton's binder does on its first call; the hook
loads memoized bindings without it), and that import's cost when taken after the hook (the
first launch pays it). ``--profile FILE`` also writes the hook's cProfile (by own and by
cumulative time) to FILE.

    python tools/_warm_phases.py CACHE_DIR [--target sm_90] [--profile FILE]
"""

import collections
import cProfile
import json
import pstats
import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402

import kernels  # noqa: E402,F401

target = sys.argv[sys.argv.index("--target") + 1] if "--target" in sys.argv else None
if target is None:
    torch.cuda.init()
    torch.empty(1, device="cuda")
import triton.backends.nvidia.driver as nv_driver  # noqa: E402
import triton.compiler.compiler as cc  # noqa: E402

import qsa_warmup  # noqa: E402
from qsa_warmup import cache  # noqa: E402
from qsa_warmup import triton_compat as tc  # noqa: E402
from qsa_warmup.triton_compat import loader  # noqa: E402

acc = collections.Counter()


def timed(owner, name, label=None):
    f = getattr(owner, name)

    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[label or name] += time.perf_counter() - t0

    setattr(owner, name, wrapper)


for owner, name in (
    (cache.BoundCache, "plan"),
    (cache.Fingerprint, "current"),
    (cache.BoundCache, "lookup"),
    (tc, "load_from_entry"),
    (tc, "init_handles"),
    (loader, "compiled_kernel_from_files"),
):
    timed(owner, name)
timed(cc, "compile", "triton_compile")
timed(tc, "current_gpu_target")  # Triton's driver starts here (its utils module loads)
timed(nv_driver, "compile_module_from_src", "c_module_loads")  # launchers and utils, from the cache
profile_path = sys.argv[sys.argv.index("--profile") + 1] if "--profile" in sys.argv else None
profiler = cProfile.Profile() if profile_path else None
t = time.perf_counter()
if profiler:
    profiler.enable()
report = qsa_warmup.warmup("default", cache_dir=sys.argv[1], target=target)
if profiler:
    profiler.disable()
total = time.perf_counter() - t
if profiler:
    with open(profile_path, "w") as f:
        for order in ("tottime", "cumulative"):
            pstats.Stats(profiler, stream=f).sort_stats(order).print_stats(40)
gluon_by_hook = "triton.experimental.gluon" in sys.modules
t = time.perf_counter()
import triton.experimental.gluon  # noqa: E402,F401  (imported by Triton's binder on its first call)

gluon_s = time.perf_counter() - t
print(
    json.dumps(
        {
            "total_s": total,
            "gluon_imported_by_hook": gluon_by_hook,
            "gluon_import_after_s": gluon_s,
            "loaded": report.loaded,
            "compiled": report.compiled,
            "phases_s": dict(acc.most_common()),
        }
    )
)
