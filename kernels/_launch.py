"""Launch descriptions shared by the launchers and the warmup planner.

A launcher never calls ``kernel[grid](...)`` directly: it builds a :class:`KernelLaunch`
from its inputs and runs it. The warmup planner builds the same object from
:class:`TensorMeta` stand-ins (shape, stride, dtype and pointer alignment, no storage) and
hands it to Triton's ``warmup``. Both go through the same argument-building code, so the
specializations the planner compiles are the ones the launchers request.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
import triton

from . import _fast_launch

__all__ = [
    "KernelLaunch",
    "TensorMeta",
    "interpreting",
    "cdiv",
    "next_power_of_2",
    "device_arch",
    "assume_arch",
    "call_key",
]


# Host-side integer helpers for the launch paths: ``triton.cdiv`` and ``triton.next_power_of_2``
# are constexpr functions in Triton 3.6 and cost microseconds a call on the host.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


_assumed_arch: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "assumed_arch", default=None
)


@contextlib.contextmanager
def assume_arch(arch: int | None) -> Iterator[None]:
    """Launch decisions inside this block are made as for a GPU of compute capability ``arch``
    whatever device the tensors are on (a coverage sweep on CPU tensors for a named target)."""
    token = _assumed_arch.set(arch)
    try:
        yield
    finally:
        _assumed_arch.reset(token)


def call_key(tensors: tuple, scalars: tuple) -> tuple | None:
    """What an op's argument checks and launch choices depend on: each tensor's class, dtype,
    shape, strides, device and 16-byte alignment, each scalar's type and value, and the arch
    assumed for launch decisions. None when a tensor is not a plain ``torch.Tensor`` (a
    subclass, a planner's stand-in): such calls are never prepared
    (:class:`kernels._fast_launch.PreparedCall`)."""
    parts = [_fast_launch.prepared_generation(), _assumed_arch.get()]
    for x in tensors:
        if x.__class__ is not torch.Tensor:
            return None
        parts.append((x.dtype, x.shape, x.stride(), x.device, x.data_ptr() % 16 == 0))
    for value in scalars:
        parts.append((value.__class__, value))
    return tuple(parts)


def device_arch(tensor) -> int | None:
    """The compute capability (e.g. 90) the launch decisions for ``tensor`` are made for: the
    one :func:`assume_arch` names, else the GPU holding it; None for a CPU tensor or a planner's
    stand-in (the dispatch then assumes an sm_90-class GPU)."""
    assumed = _assumed_arch.get()
    if assumed is not None:
        return assumed
    device = tensor.device
    if device.type != "cuda":
        return None
    return _cuda_arch(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)  # a device's capability never changes: keep it off the host path
def _cuda_arch(index: int) -> int:
    major, minor = torch.cuda.get_device_capability(index)
    return major * 10 + minor


def current_stream_handle(device: torch.device) -> int:
    """The current stream of ``device`` as a number (0 off CUDA), as cheaply as Triton's
    launcher asks for it."""
    if device.type != "cuda":
        return 0
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch._C._cuda_getCurrentRawStream(index)


def stream_capturing(device: torch.device) -> bool:
    """Whether the current stream of ``device`` is capturing a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


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
        if 0 in self.grid:
            return
        _fast_launch.launch(self.kernel, self.grid, self.args, self.options)

    def warmup(self):
        """Compile (or load from Triton's cache) without launching; returns the CompiledKernel."""
        return self.kernel.warmup(*self.args, grid=self.grid, **self.options)

    @property
    def kernel_name(self) -> str:
        fn = getattr(self.kernel, "fn", None)
        return getattr(fn, "__name__", repr(self.kernel))
