"""Launch descriptions shared by the launchers and the warmup planner.

A launcher never calls ``kernel[grid](...)`` directly: it builds a :class:`KernelLaunch`
from its inputs and runs it. The warmup planner builds the same object from
:class:`TensorMeta` stand-ins (shape, stride, dtype and pointer alignment, no storage) and
hands it to Triton's ``warmup``. Both go through the same argument-building code, so the
specializations the planner compiles are the ones the launchers request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
from triton import knobs

__all__ = ["KernelLaunch", "TensorMeta", "interpreting", "cdiv", "next_power_of_2", "clear_direct_launches"]


# Host-side integer helpers for the launch paths: ``triton.cdiv`` and ``triton.next_power_of_2``
# are constexpr functions in Triton 3.6 and cost microseconds a call on the host.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return bool(triton.knobs.runtime.interpret)


class TensorMeta:
    """A tensor's metadata without storage: what Triton's binder and the launchers read.

    ``misalign`` is the byte offset of ``data_ptr()`` from a 16-byte boundary, so a planner
    can describe the unaligned views that slicing a larger buffer produces.
    """

    _BASE = 1 << 20

    def __init__(self, shape, dtype: torch.dtype, stride=None, misalign: int = 0):
        self.shape = torch.Size(shape)
        self.dtype = dtype
        if stride is None:
            stride, running = [], 1
            for size in reversed(self.shape):
                stride.append(running)
                running *= max(int(size), 1)
            stride = tuple(reversed(stride))
        self._stride = tuple(int(s) for s in stride)
        self.misalign = int(misalign)
        self.device = torch.device("meta")

    def stride(self, dim: int | None = None):
        return self._stride if dim is None else self._stride[dim]

    def data_ptr(self) -> int:
        return self._BASE + self.misalign

    def dim(self) -> int:
        return len(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype, device="meta").element_size()

    def is_contiguous(self) -> bool:
        return self._stride == TensorMeta(self.shape, self.dtype)._stride

    def __repr__(self) -> str:
        return f"TensorMeta({tuple(self.shape)}, {self.dtype}, misalign={self.misalign})"


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch: the JIT function, its grid, positional args and keyword options.

    ``options`` holds the constexpr arguments and the compile options (``num_warps``,
    ``num_stages``); everything that selects a compiled variant is in ``args`` (through
    Triton's binder) or ``options``.
    """

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
    options: dict = field(default_factory=dict)

    def run(self) -> None:
        """Launch: through Triton's ``JITFunction.run`` the first time a specialization is seen
        (it binds, looks up or compiles), directly through the compiled kernel afterwards."""
        if math.prod(self.grid) == 0:
            return
        key = _direct_key(self)
        entry = _DIRECT.get(key) if key is not None else None
        if entry is None:
            compiled = self.kernel.run(*self.args, grid=self.grid, warmup=False, **self.options)
            if key is not None and compiled is not None and not hasattr(compiled, "result"):
                tail = tuple(self.kernel.arg_names[len(self.args):])
                _DIRECT[key] = (compiled, tail)
            return
        compiled, tail = entry
        grid = self.grid
        options = self.options
        args = self.args + tuple(options[name] for name in tail)
        device = key[1]
        stream = _driver().get_current_stream(device)
        compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                     compiled.function, compiled.packed_metadata, compiled.launch_metadata(grid, stream, *args),
                     knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *args)

    def warmup(self):
        """Compile (or load from Triton's cache) without launching; returns the CompiledKernel."""
        return self.kernel.warmup(*self.args, grid=self.grid, **self.options)

    @property
    def kernel_name(self) -> str:
        fn = getattr(self.kernel, "fn", None)
        return getattr(fn, "__name__", repr(self.kernel))


# -- direct launches ---------------------------------------------------------------------------
# Triton's ``JITFunction.run`` binds every argument (specialization), builds a string cache key
# and looks it up on every launch: tens of microseconds of host time a launch on the H200's host
# (docs/benchmarks.md). A launch whose specialization was seen before goes straight to the
# compiled kernel instead. The direct key is at least as fine as Triton's: for each tensor its
# dtype and 16-byte alignment, for each int whether it is 1, divisible by 16 and its width,
# whatever ``do_not_specialize`` says, plus every option, the device and the knobs Triton adds
# to its key. Any other argument type, the interpreter, or a JIT function with pre-run hooks
# takes Triton's path every time.
_DIRECT: dict = {}


def _driver():
    return triton.runtime.driver.active


def _direct_key(launch: KernelLaunch):
    kernel = launch.kernel
    if knobs.runtime.interpret or getattr(kernel, "pre_run_hooks", True):
        return None
    parts = []
    for arg in launch.args:
        if type(arg) is int:
            parts.append((arg == 1, arg % 16 == 0, -(1 << 31) <= arg < (1 << 31), arg < (1 << 63)))
        elif isinstance(arg, (torch.Tensor, TensorMeta)):
            parts.append((arg.dtype, arg.data_ptr() % 16 == 0))
        else:
            return None
    try:
        options = tuple(launch.options.items())
        hash(options)
    except TypeError:
        return None
    return (kernel, _driver().get_current_device(), options, tuple(parts), knobs.runtime.debug,
            knobs.compilation.instrumentation_mode)


def clear_direct_launches() -> None:
    """Forget the compiled kernels remembered for direct launches (the next launch of each
    specialization goes through Triton's ``JITFunction.run`` again)."""
    _DIRECT.clear()
