"""Eager launches straight to the compiled kernel, once Triton has chosen it.

``JITFunction.run`` pays, on every launch, for its binder, a cache key built from ``str`` of
every option, knob reads, launch metadata, calls into empty launch-hook chains and a Python
wrapper around the C launcher: microseconds a launch, and a decode step is several launches
whose kernels take a few microseconds each (tools/bench_host.py, tools/bench_kernels.py). A
launch here first builds a cheaper key that is at
least as fine as Triton's (every argument's Triton type, its 16-byte alignment, the int
specializations 1 and multiple of 16 whether or not the kernel specializes on them, every
option's name, type and value, the device and the two knobs that enter Triton's key). The first
launch of a key goes through ``JITFunction.run`` and remembers the kernel Triton chose; later
ones call that kernel's launcher directly, as ``JITFunction.run`` itself does, after checking
that Triton's in-memory cache still holds the same kernel under the same key (a cache emptied
for a rebuild sends the launch back through Triton, its hooks included).

Never taken: under the interpreter, with a launch enter/exit hook or a kernel pre-run hook set
(profilers), for argument types other than tensors, ints, bools, floats and None, or while
:func:`triton_launches_only` is in force. Not repeated on the fast path: Triton's check that a
global the kernel read has not been reassigned since it compiled (the kernels here read module
constants only).

An op call whose arguments' metadata and scalars match a call already checked replays that
call's bound launches (:class:`PreparedCall`, below): no argument checks, launch choices or
fast keys again.

This module and :mod:`kernels._launch` are the only places in ``kernels/`` that know how
Triton's runtime launches (written against Triton 3.6).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, NamedTuple

import torch
from triton import knobs
from triton.knobs import HookChain
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

__all__ = [
    "launch",
    "triton_launches_only",
    "fast_launch_stats",
    "forget_fast_launches",
    "PreparedCall",
    "prepared_generation",
    "remember_prepared",
]


class _Bound(NamedTuple):
    """What a fast launch needs, and what proves it is still Triton's choice."""

    triton_key: str
    compiled: Any
    launch: Callable  # called with the grid, the stream, prefix, the arguments, constexpr_tail
    prefix: tuple
    constexpr_tail: tuple  # option values of the parameters after the positional ones


_bound: dict[tuple, _Bound] = {}


class _ThreadState(threading.local):
    # a class attribute, so a thread that never asked reads False without the AttributeError
    # that getattr with a default raises and catches (most of a microsecond, on every call)
    triton_only = False


_local = _ThreadState()
_stats = {"fast": 0, "triton": 0, "prepared": 0}

_I32_MIN, _I32_MAX, _U64_MIN = -(2**31), 2**31 - 1, 2**63


class _NotFast(Exception):
    pass


def _arg_classes(args) -> tuple:
    """Every property of each argument that Triton's specialization may depend on (finer is
    fine): Triton types ints as i32, i64 or u64 by range and specializes 1 and multiples of
    16; tensors by dtype and 16-byte alignment; every float is an fp32 argument."""
    classes = []
    for arg in args:
        cls = arg.__class__
        if cls is torch.Tensor:
            classes.append((arg.dtype, arg.data_ptr() % 16 == 0))
        elif cls is int:
            classes.append(
                (arg == 1, arg % 16 == 0, _I32_MIN <= arg <= _I32_MAX, arg < 0, arg >= _U64_MIN)
            )
        elif cls is bool or arg is None:
            classes.append((cls, arg))
        elif cls is float:
            classes.append(cls)
        else:
            raise _NotFast
    return tuple(classes)


def _fast_key(kernel, device, args, options) -> tuple:
    runtime = knobs.runtime
    return (
        id(kernel),  # JITFunction hashes through its source hash; a bound kernel is checked anyway
        device,
        _arg_classes(args),
        tuple(options.items()),
        tuple(map(type, options.values())),  # True and 1 are one dict key, not one Triton key
        runtime.debug,
        knobs.compilation.instrumentation_mode,
    )


def _fast_path_off(kernel) -> bool:
    if not isinstance(kernel, JITFunction):
        return True  # the interpreter's functions
    return _triton_path_asked() or bool(kernel.pre_run_hooks)


def _triton_path_asked() -> bool:
    """Whether this thread asked for Triton's path, or a profiler set a launch hook (Triton 3.6
    keeps launch hooks in chains that are empty unless a profiler adds to them)."""
    if _local.triton_only:
        return True
    runtime = knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and (hook.__class__ is not HookChain or hook.calls):
            return True
    return False


def launch(kernel, grid: tuple[int, ...], args: tuple, options: dict) -> None:
    """``kernel[grid](*args, **options)``, on the fast path when it may be taken."""
    if _fast_path_off(kernel):
        _through_triton(kernel, grid, args, options)
        return
    active = driver.active
    device = active.get_current_device()
    try:
        key = _fast_key(kernel, device, args, options)
    except _NotFast:
        _through_triton(kernel, grid, args, options)
        return
    bound = _bound.get(key)
    if bound is not None:
        # the kernel's current in-memory cache, not the one bound: a rebuild replaces it
        caches = kernel.device_caches.get(device)
        if caches is not None and caches[0].get(bound.triton_key) is bound.compiled:
            _stats["fast"] += 1
            bound.launch(
                grid[0],
                grid[1] if len(grid) > 1 else 1,
                grid[2] if len(grid) > 2 else 1,
                active.get_current_stream(device),
                *bound.prefix,
                *args,
                *bound.constexpr_tail,
            )
            return
    compiled = _through_triton(kernel, grid, args, options)
    _remember(key, kernel, device, compiled, args, options)


def _through_triton(kernel, grid, args, options):
    _stats["triton"] += 1
    return kernel[grid](*args, **options)


def _launcher_call(compiled) -> tuple[Callable, tuple]:
    """(callable, arguments after the stream) launching ``compiled`` with no launch metadata
    and no hooks. Triton's CUDA launcher object only adds scratch buffers around its C entry
    point: for a kernel that needs none, the C entry point is called directly."""
    runner = compiled.run
    common = (compiled.packed_metadata, None, None, None)
    c_entry = getattr(runner, "launch", None)
    if (
        type(runner).__name__ == "CudaLauncher"
        and c_entry is not None
        and getattr(runner, "global_scratch_size", 1) == 0
        and getattr(runner, "profile_scratch_size", 1) == 0
    ):
        flags = (runner.launch_cooperative_grid, runner.launch_pdl, None, None)
        return c_entry, (compiled.function, *flags, *common)
    return runner, (compiled.function, *common)


def _remember(key, kernel, device, compiled, args, options) -> None:
    if compiled is None or hasattr(compiled, "result"):  # not launched, or compiled async
        return
    caches = kernel.device_caches.get(device)
    if caches is None:
        return
    kernel_cache = caches[0]
    triton_key = next((k for k, v in kernel_cache.items() if v is compiled), None)
    if triton_key is None:
        return
    tail = []
    for param in kernel.params[len(args) :]:
        if param.name in options:
            tail.append(options[param.name])
        elif param.has_default:
            tail.append(param.default)
        else:  # a parameter Triton would have refused: never reached after a launch
            return
    _bound[key] = _Bound(triton_key, compiled, *_launcher_call(compiled), tuple(tail))


@contextlib.contextmanager
def triton_launches_only() -> Iterator[None]:
    """Launches in this thread go through ``JITFunction.run`` every time (benchmarks, tests)."""
    previous = _local.triton_only
    _local.triton_only = True
    try:
        yield
    finally:
        _local.triton_only = previous


def fast_launch_stats() -> dict[str, int]:
    """Since the process started: launches taken on the fast path (``fast``) and through
    Triton (``triton``), and op calls replayed from a prepared call (``prepared``, their
    launches counted in neither)."""
    return dict(_stats)


def forget_fast_launches() -> None:
    """Drop every remembered kernel (the next launch of each goes through Triton again) and
    every prepared op call."""
    _bound.clear()
    _prepared_generation[0] += 1


# -- prepared op calls ---------------------------------------------------------------------
# An op's eager call checks its arguments, chooses its launches and builds each launch's fast
# key: all of it a function of its arguments' metadata (class, dtype, shape, strides, device,
# 16-byte alignment) and its scalar arguments. An op keeps, per such key, the launches one
# checked call made (a PreparedCall): a later call with the same key has passed the same
# checks and chooses the same launches, so it only rebuilds their argument tuples from its
# tensors and calls the bound launchers. Anything a key cannot vouch for is checked on every
# call: the tensors the op allocates itself (alignment), the current device, the two knobs in
# Triton's key, launch hooks, and that Triton still holds each bound kernel; any doubt sends
# the call down the op's checked path, which prepares it again.
_prepared_generation = [0]


def prepared_generation() -> int:
    """Changes whenever prepared calls must be dropped (part of every op call's key)."""
    return _prepared_generation[0]


class _Step(NamedTuple):
    kernel: Any
    # the launcher's whole argument list: the grid (three), None where the stream goes, the
    # bound prefix, the arguments (None where a tensor of the call goes), the constexpr tail
    call_args: tuple
    slots: tuple  # (position in call_args, index into the call's tensors)
    bound: _Bound


_STREAM_SLOT = 3  # after the grid's three sizes


class PreparedCall:
    """The launches of one checked op call, replayable with another call's tensors (those of
    the same key, then the ones the op allocated, in the order given at preparation)."""

    __slots__ = ("_steps", "_device", "_knobs", "_fresh", "_generation")

    def __init__(self, steps, device, knob_state, fresh, generation):
        self._steps = steps
        self._device = device
        self._knobs = knob_state
        self._fresh = fresh
        self._generation = generation

    def run(self, tensors: tuple) -> bool:
        """:meth:`ready`, then :meth:`launch`."""
        return self.ready() and self.launch(tensors)

    def ready(self) -> bool:
        """Whether a replay may be made now (asked before the op allocates its own tensors):
        the same device and knobs, no hooks, Triton still holding every bound kernel."""
        # what holds for the whole call is asked once, not once a launch: this runs every call
        if self._generation != _prepared_generation[0] or _triton_path_asked():
            return False
        device = driver.active.get_current_device()
        if device != self._device or _knob_state() != self._knobs:
            return False
        for step in self._steps:  # each a JITFunction: _prepare_call took no other
            kernel = step.kernel
            caches = kernel.device_caches.get(device)
            if (
                caches is None
                or caches[0].get(step.bound.triton_key) is not step.bound.compiled
                or kernel.pre_run_hooks
            ):
                return False
        return True

    def launch(self, tensors: tuple) -> bool:
        """Launch with ``tensors`` after :meth:`ready`; False, having launched nothing, when a
        tensor the op allocated is not 16-byte aligned as at preparation."""
        for index in self._fresh:
            if tensors[index].data_ptr() % 16:
                return False
        stream = driver.active.get_current_stream(self._device)
        for step in self._steps:
            args = list(step.call_args)  # one copy, filled in place: no tuple concatenation
            args[_STREAM_SLOT] = stream
            for position, index in step.slots:
                args[position] = tensors[index]
            step.bound.launch(*args)
        _stats["prepared"] += 1
        return True


_MAX_PREPARED = 256  # per op: a deployment reaches a few geometries


def remember_prepared(
    calls: dict, key, launches, tensors: tuple, *, fresh: int = 0, extra=None
) -> None:
    """Prepare the launches one checked op call just made (the last ``fresh`` of ``tensors``
    are the ones the op allocated itself) and keep ``(call, extra)`` under the call's key in
    the op's dict; nothing when the key is None or the call cannot be prepared. An op that
    sees an endless stream of new geometries starts its dict over rather than growing it."""
    if key is None:
        return
    call = _prepare_call(launches, tensors, tuple(range(len(tensors) - fresh, len(tensors))))
    if call is None:
        return
    if len(calls) >= _MAX_PREPARED:
        calls.clear()
    calls[key] = (call, extra)


def _knob_state() -> tuple:
    return (knobs.runtime.debug, knobs.compilation.instrumentation_mode)


def _prepare_call(launches, tensors: tuple, fresh: tuple):
    """A PreparedCall replaying ``launches`` (each with ``kernel``, ``grid``, ``args`` and
    ``options``, every one already launched on the fast path) with the tensors of a later
    call; ``fresh`` indexes the tensors the op allocates per call. None when it cannot be
    prepared (a launch not bound or taking a tensor not among ``tensors``, a hook set, the
    interpreter)."""
    if any(_fast_path_off(item.kernel) for item in launches):
        return None  # the interpreter's kernels among them: no driver to ask either
    if any(tensors[index].data_ptr() % 16 for index in fresh):
        return None  # its launches were bound for an alignment the replay would not check
    generation = _prepared_generation[0]
    active = driver.active
    device = active.get_current_device()
    steps = []
    for item in launches:
        kernel, grid, args, options = item.kernel, item.grid, item.args, item.options
        if 0 in grid:  # launches nothing
            continue
        try:
            bound = _bound.get(_fast_key(kernel, device, args, options))
        except _NotFast:
            return None
        if bound is None:
            return None
        grid3 = (tuple(grid) + (1, 1))[:3]
        head = (*grid3, None, *bound.prefix)  # None: the stream, filled per launch
        slots, constants = [], []
        for position, arg in enumerate(args, start=len(head)):
            if arg.__class__ is torch.Tensor:
                index = next((i for i, t in enumerate(tensors) if t is arg), None)
                if index is None:
                    return None
                slots.append((position, index))
                constants.append(None)
            else:
                constants.append(arg)
        call_args = (*head, *constants, *bound.constexpr_tail)
        steps.append(_Step(kernel, call_args, tuple(slots), bound))
    return PreparedCall(tuple(steps), device, _knob_state(), tuple(fresh), generation)
