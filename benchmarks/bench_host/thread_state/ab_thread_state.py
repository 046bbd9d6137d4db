"""CPU box A/B: bench_host's setup (offline sm_90 driver, no-op C launchers), the replayed
decode select and ragged_topk with `_triton_path_asked` reading the thread's flag through
getattr with a default (before) or a class attribute of a threading.local subclass (now),
alternating rounds in one process. Usage: python3 benchmarks/bench_host/thread_state/ab_thread_state.py"""

import os
import sys
import threading

os.environ.pop("TRITON_INTERPRET", None)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import triton  # noqa: E402
import triton.compiler  # noqa: E402
from triton import knobs  # noqa: E402
from triton.knobs import HookChain  # noqa: E402

import bench_host  # noqa: E402
from kernels import _fast_launch as fl  # noqa: E402
from qsa_warmup.triton_compat.targets import active_driver, parse_target  # noqa: E402

_plain_local = threading.local()


def before():
    """The check as it was: a thread that never asked raises and catches AttributeError."""
    if getattr(_plain_local, "triton_only", False):
        return True
    runtime = knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and (hook.__class__ is not HookChain or hook.calls):
            return True
    return False


now = fl._triton_path_asked
triton.compiler.compile = bench_host._compile_without_launcher(triton.compiler.compile)
with active_driver(parse_target("sm_90")):
    cases = [(name, fn) for name, fn in bench_host.cases() if not name.startswith("prefill")]
    for _, fn in cases:
        fn()
        fn()
    for rnd in range(6):
        for label, check in (("before", before), ("now", now)):
            fl._triton_path_asked = check
            times = "  ".join(
                f"{name} {bench_host.per_call_us(fn, 3000):6.2f} us" for name, fn in cases
            )
            print(f"round {rnd} {label:6s} {times}", flush=True)
    fl._triton_path_asked = now
