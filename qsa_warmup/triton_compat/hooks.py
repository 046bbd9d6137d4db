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


_installed_hook: Callable | None = None


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
def _for_a_while(owner, name: str, make: Callable[[Callable | None], Callable]) -> Iterator[None]:
    """``owner.name = make(previous)`` for the duration: on exit the previous value comes back
    if ours is still there; if another library replaced it meanwhile (chaining onto ours), its
    value stays and ours passes every call through to ``previous`` from then on."""
    previous = getattr(owner, name)
    active = [True]
    inner = make(previous)

    def ours(**kwargs):
        if active[0]:
            return inner(**kwargs)
        return previous(**kwargs) if previous else None

    setattr(owner, name, ours)
    try:
        yield
    finally:
        active[0] = False
        if getattr(owner, name) is ours:
            setattr(owner, name, previous)


@contextlib.contextmanager
def capture_requests(*, block: bool) -> Iterator[list[RequestedVariant]]:
    """Record every compile request Triton's runtime makes (``jit_cache_hook``).

    ``block=True`` answers each request with "skip": nothing is compiled or launched, which is
    how ``check --trace`` runs the launchers on CPU tensors (hooks installed before are not
    asked then: nothing compiles)."""
    seen: list[RequestedVariant] = []
    with _observing_requests(
        lambda fn, key, compile: seen.append(_variant_from_hook(fn, key, compile)), block=block
    ):
        yield seen


@contextlib.contextmanager
def _observing_requests(observe: Callable, *, block: bool) -> Iterator[None]:
    """``observe(fn, key, compile)`` for every compile request (``jit_cache_hook``), then skip
    the compile (``block``) or pass the request on to the hook installed before."""

    def make(previous):
        def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
            observe(fn, key, compile)
            if block:
                return True
            return bool(previous) and previous(
                key=key,
                repr=repr,
                fn=fn,
                compile=compile,
                is_manual_warmup=is_manual_warmup,
                already_compiled=already_compiled,
            )

        return hook

    with _for_a_while(knobs.runtime, "jit_cache_hook", make):
        yield


def install_jit_cache_hook(hook: Callable[[RequestedVariant, str], bool]) -> None:
    """Chain ``hook(variant, module)`` -> bool (True: skip the compile) behind whatever
    ``jit_cache_hook`` is installed now (vLLM's JIT monitor, another library's): that one is
    asked first, so it sees every request, and if it skips the compile ours is not asked.
    A hook installed later that chains onto this one (as vLLM's does) keeps both working.
    Installing the same hook again does nothing while it is installed (a second warmup must
    not chain onto a later library's hook a second time); :func:`triton_compat.restore` takes
    it out of the way."""
    global _installed_hook
    if _installed_hook is hook and _patches.is_replaced(knobs.runtime, "jit_cache_hook"):
        return
    previous = knobs.runtime.jit_cache_hook

    def chained(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        if previous and previous(
            key=key,
            repr=repr,
            fn=fn,
            compile=compile,
            is_manual_warmup=is_manual_warmup,
            already_compiled=already_compiled,
        ):
            return True
        if not _patches.is_replaced(knobs.runtime, "jit_cache_hook"):
            return False  # restored, but still in a later hook's chain: pass through
        return bool(hook(_variant_from_hook(fn, key, compile), fn.module))

    _patches.replace(knobs.runtime, "jit_cache_hook", chained)
    _installed_hook = hook


@contextlib.contextmanager
def compilation_listener(callback: Callable[[str, bool], None]) -> Iterator[None]:
    """``callback(kernel_name, cache_hit)`` for every compile request that reaches compile(),
    after the listener installed before (which keeps being called)."""

    def make(previous):
        def listener(*, src, metadata, metadata_group, times, cache_hit):
            if previous:
                previous(
                    src=src,
                    metadata=metadata,
                    metadata_group=metadata_group,
                    times=times,
                    cache_hit=cache_hit,
                )
            callback(metadata.get("name", "?"), cache_hit)

        return listener

    with _for_a_while(knobs.compilation, "listener", make):
        yield


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
