"""CPU box A/B of PreparedCall.ready: d963de2's (hooks checked once a launch) vs now (once a
call), alternating rounds, bench_host's setup (offline sm_90 driver, no-op
launchers). Usage, from the repository root:
python3 benchmarks/bench_host/7bcfd0f/ab_ready.py"""
import sys
sys.path.insert(0, "tools"); sys.path.insert(0, ".")
import bench_host as B
import triton
import kernels._fast_launch as F
from qsa_warmup.triton_compat.targets import active_driver, parse_target

new_ready = F.PreparedCall.ready


def old_ready(self):  # d963de2's
    if self._generation != F._prepared_generation[0] or getattr(F._local, "triton_only", False):
        return False
    device = F.driver.active.get_current_device()
    if device != self._device or F._knob_state() != self._knobs:
        return False
    for step in self._steps:
        caches = step.kernel.device_caches.get(device)
        if (
            caches is None
            or caches[0].get(step.bound.triton_key) is not step.bound.compiled
            or _old_fast_path_off(step.kernel)
        ):
            return False
    return True


def _old_fast_path_off(kernel):  # d963de2's
    if getattr(F._local, "triton_only", False) or not isinstance(kernel, F.JITFunction):
        return True
    runtime = F.knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and (hook.__class__ is not F.HookChain or hook.calls):
            return True
    return bool(kernel.pre_run_hooks)


triton.compiler.compile = B._compile_without_launcher(triton.compiler.compile)
with active_driver(parse_target("sm_90")):
    cases = [(n, f) for n, f in B.cases() if n in ("decode select 1x2048", "ragged_topk 1x2048", "decode select 64x32768")]
    for n, f in cases:
        f(); f()
    for rnd in range(6):
        for label, impl in ((("d963de2", old_ready), ("now", new_ready)) if rnd % 2 == 0 else (("now", new_ready), ("d963de2", old_ready))):
            F.PreparedCall.ready = impl
            row = []
            for n, f in cases:
                before = F.fast_launch_stats()["prepared"]
                us = B.per_call_us(f, 3000)
                assert F.fast_launch_stats()["prepared"] - before == 9000
                row.append(f"{n} {us:5.2f}")
            print(f"round {rnd} {label:8s} " + "   ".join(row), flush=True)
