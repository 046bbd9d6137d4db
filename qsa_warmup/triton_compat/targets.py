"""GPU targets: names, what this Triton compiles for, their limits, and an offline driver that
lets Triton's own binder and compiler run for a named target on a machine without that GPU."""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Iterator

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime.driver import driver as _driver_config

__all__ = [
    "GPUTarget",
    "parse_target",
    "target_name",
    "compilable_archs",
    "target_limits",
    "current_gpu_target",
    "OfflineDriver",
    "active_driver",
    "set_active_target",
    "device_context",
    "TARGET_LIMITS",
]

_TARGET_RE = re.compile(r"^sm_(\d+)a?$")

# CUDA compute capabilities Triton 3.6's NVIDIA backend compiles for (its bundled ptxas 12.8
# below 100, ptxas-blackwell 12.9 from 100; tests/test_targets.py checks both accept each one
# and compiles the smallest and largest).
_COMPILABLE = {"3.6.0": (80, 86, 87, 89, 90, 100, 103, 120, 121)}

# Per-block limits of each target: (max dynamic shared memory bytes, max threads), from the CUDA
# programming guide's table (``kernels.limits`` holds the same numbers for the kernels' own
# tile sizing; tests/test_targets.py checks that the two agree).
TARGET_LIMITS = {
    80: (166912, 1024),
    86: (101376, 1024),
    87: (166912, 1024),
    89: (101376, 1024),
    90: (232448, 1024),
    100: (232448, 1024),
    103: (232448, 1024),
    120: (101376, 1024),
    121: (101376, 1024),
}


def parse_target(name: str) -> GPUTarget:
    """``"sm_90"`` -> GPUTarget("cuda", 90, 32). Raises ValueError on other spellings and on
    targets this Triton cannot compile for."""
    match = _TARGET_RE.match(name.strip()) if isinstance(name, str) else None
    if not match:
        raise ValueError(f"{name!r} is not a CUDA target name such as 'sm_90'")
    arch = int(match.group(1))
    if arch not in compilable_archs():
        known = ", ".join(f"sm_{a}" for a in compilable_archs())
        raise ValueError(
            f"triton {triton.__version__} cannot compile for sm_{arch}; it compiles for {known}"
        )
    return GPUTarget("cuda", arch, 32)


def compilable_archs() -> tuple[int, ...]:
    return _COMPILABLE.get(triton.__version__, _COMPILABLE["3.6.0"])


def target_name(target: GPUTarget) -> str:
    return f"sm_{target.arch}"


def target_limits(arch: int) -> tuple[int, int] | None:
    """(max shared memory bytes, max threads) of one block on ``arch``, if known."""
    return TARGET_LIMITS.get(arch)


def current_gpu_target() -> GPUTarget | None:
    """The target of the local GPU, or None on a machine without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return _driver_config.default.get_current_target()
    except Exception:  # a broken driver counts as no GPU: offline builds still work
        return None


class OfflineDriver(DriverBase):
    """A driver for a named target that owns no device: compile and bind, never launch."""

    def __init__(self, target: GPUTarget):
        super().__init__()
        self._target = target

    @classmethod
    def is_active(cls):
        return False

    def map_python_to_cpp_type(self, ty: str) -> str:
        from triton.backends.nvidia.driver import ty_to_cpp

        return ty_to_cpp(ty)

    def get_current_target(self):
        return self._target

    def get_current_device(self):
        # Triton keeps a JIT function's compiled kernels per device index, with the binder and
        # backend of the target first seen there: each offline target gets its own index
        # (negative: never a real GPU's), so one process can build for several targets
        return -self._target.arch

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    # set while recording under this driver: an autotuner's benchmark then calls each config
    # once (its compile request is recorded, nothing runs) and every config times the same
    calls_to_benchmark = False

    def get_benchmarker(self):
        if not OfflineDriver.calls_to_benchmark:
            raise RuntimeError("the offline driver cannot run kernels")

        def call_once(fn, quantiles=None, **_):
            fn()
            return [1.0] * len(quantiles) if quantiles else 1.0

        return call_once


_driver_lock = threading.RLock()  # re-entered: a plan built inside an active_driver block


@contextlib.contextmanager
def active_driver(target: GPUTarget | None) -> Iterator[None]:
    """Make ``OfflineDriver(target)`` Triton's active driver (None: keep the real one)."""
    if target is None:
        yield
        return
    with _driver_lock:
        previous = _driver_config._active
        _driver_config.set_active(OfflineDriver(target))
        try:
            yield
        finally:
            _driver_config._active = previous


def set_active_target(target: GPUTarget | None) -> None:
    """Make the offline driver for ``target`` active for the rest of this process (workers)."""
    if target is not None:
        _driver_config.set_active(OfflineDriver(target))


@contextlib.contextmanager
def device_context(index: int | None) -> Iterator[None]:
    if index is None:
        yield
        return
    import torch

    with torch.cuda.device(index):
        yield
