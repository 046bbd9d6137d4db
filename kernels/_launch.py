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

__all__ = ["KernelLaunch", "TensorMeta", "interpreting", "cdiv", "next_power_of_2"]


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
        if math.prod(self.grid) == 0:
            return
        self.kernel[self.grid](*self.args, **self.options)

    def warmup(self):
        """Compile (or load from Triton's cache) without launching; returns the CompiledKernel."""
        return self.kernel.warmup(*self.args, grid=self.grid, **self.options)

    @property
    def kernel_name(self) -> str:
        fn = getattr(self.kernel, "fn", None)
        return getattr(fn, "__name__", repr(self.kernel))
