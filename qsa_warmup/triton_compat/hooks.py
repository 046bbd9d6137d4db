"""Triton's runtime hooks: the compile requests a launch makes (``jit_cache_hook``), the
compiles that reach ``compile()`` (the compilation listener), and forcing a fresh compile."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Callable, Iterator

from triton import knobs

from . import _patches

__all__ = [
    "RequestedVariant",
    "capture_requests",
    "install_jit_cache_hook",
    "compilation_listener",
    "forced_compile",
]


@dataclass(frozen=True)
class RequestedVariant:
    """A specialization the runtime asked for: kernel name and Triton's in-memory cache key."""

    kernel: str
    key: str
    constants: str
    num_warps: int
    num_stages: int


def _variant_from_hook(fn, key, compile) -> RequestedVariant:
    # constants are keyed by argument path, e.g. (6,); name them after the kernel's parameters
    names = fn.jit_function.arg_names

    def name(path):
        if isinstance(path, tuple) and len(path) == 1 and path[0] < len(names):
            return names[path[0]]
        return str(path)

    constants = {name(k): v for k, v in compile["constants"].items()}
    return RequestedVariant(
        kernel=fn.name,
        key=str(key),
        constants=json.dumps(constants, sort_keys=True, default=str),
        num_warps=compile["num_warps"],
        num_stages=compile["num_stages"],
    )


@contextlib.contextmanager
def capture_requests(*, block: bool) -> Iterator[list[RequestedVariant]]:
    """Record every compile request Triton's runtime makes (``jit_cache_hook``).

    ``block=True`` answers each request with "skip": nothing is compiled or launched, which is
    how ``check --trace`` runs the launchers on CPU tensors."""
    seen: list[RequestedVariant] = []
    previous = knobs.runtime.jit_cache_hook

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        seen.append(_variant_from_hook(fn, key, compile))
        return block

    knobs.runtime.jit_cache_hook = hook
    try:
        yield seen
    finally:
        knobs.runtime.jit_cache_hook = previous


def install_jit_cache_hook(hook: Callable[[RequestedVariant, str], bool]) -> None:
    """Chain ``hook(variant, module)`` -> bool (True: skip the compile) in front of whatever
    ``jit_cache_hook`` was set before (vLLM's JIT monitor chains the same way). Installed once;
    :func:`triton_compat.restore` puts the previous hook back."""
    previous = _patches.original(knobs.runtime, "jit_cache_hook")

    def chained(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        if hook(_variant_from_hook(fn, key, compile), fn.module):
            return True
        if previous:
            return previous(
                key=key,
                repr=repr,
                fn=fn,
                compile=compile,
                is_manual_warmup=is_manual_warmup,
                already_compiled=already_compiled,
            )
        return False

    _patches.replace(knobs.runtime, "jit_cache_hook", chained)


@contextlib.contextmanager
def compilation_listener(callback: Callable[[str, bool], None]) -> Iterator[None]:
    """``callback(kernel_name, cache_hit)`` for every compile request that reaches compile()."""
    previous = knobs.compilation.listener

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        callback(metadata.get("name", "?"), cache_hit)
        if previous:
            previous(
                src=src,
                metadata=metadata,
                metadata_group=metadata_group,
                times=times,
                cache_hit=cache_hit,
            )

    knobs.compilation.listener = listener
    try:
        yield
    finally:
        knobs.compilation.listener = previous


@contextlib.contextmanager
def forced_compile(enabled: bool = True) -> Iterator[None]:
    """Compile even if Triton's file cache has the kernel: its files carry no checksum, so a
    kernel without a verified qsa entry is never taken from there."""
    previous = knobs.compilation.always_compile
    knobs.compilation.always_compile = enabled or previous
    try:
        yield
    finally:
        knobs.compilation.always_compile = previous
