"""Compile requests of any Triton kernel, as a recording keeps them, and building or binding them
again from Triton's own serialization of the request (``JITFunction.preload``'s input).

A request is named by the kernel's module and qualified name, a hash of its source text, the
in-memory key Triton asked for, Triton's specialization data (signature, constexprs,
specialization attributes, options, key) and the target it was asked on."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import triton

from .hooks import _observing_requests
from .loader import _backend_for, _unbound_source, is_jit_function
from .targets import GPUTarget, target_name

__all__ = [
    "RecordedRequest",
    "recording_requests",
    "source_hash",
    "resolve_jit_function",
    "named_object",
    "unwrapped",
    "KernelNotFound",
    "recorded_compile_hash",
    "preload_recorded",
    "recorded_options",
    "retarget_specialization",
    "localized_specialization",
]


@dataclass(frozen=True)
class RecordedRequest:
    module: str
    qualname: str
    source_hash: str  # :func:`source_hash` of the kernel when it was recorded
    key: str  # Triton's in-memory cache key
    specialization: str  # Triton's serialize_specialization_data
    target: str  # e.g. sm_90
    autotuned: bool = False  # the request came from a triton.autotune benchmark or winner

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """What makes two requests one build: the kernel, Triton's key and the target."""
        return (self.module, self.qualname, self.key, self.target)


def source_hash(fn) -> str:
    """A hash of the JIT function's own source text: a recording made from other source is
    refused (its bindings may name parameters that no longer exist)."""
    return hashlib.sha256(fn.src.encode()).hexdigest()[:16]


def _autotuning() -> bool:
    # Triton's autotuner benchmarks each config through JITFunction.run: its requests arrive
    # with the autotuner's frames on the stack
    import sys

    frame = sys._getframe(3)
    while frame is not None:
        if frame.f_code.co_filename.endswith(("autotuner.py",)):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def recording_requests(
    on_request: Callable[[RecordedRequest], None], *, block: bool = False
) -> Iterator[None]:
    """Call ``on_request`` for every compile request Triton's runtime makes (any kernel; only a
    kernel not yet in memory asks), then let the request go on unchanged (``block=True``:
    answer "skip", so nothing compiles or launches: recording on CPU tensors under the offline
    driver). A hook installed before is asked after ours, unless ``block``."""

    def observe(fn, key, compile):
        jit = fn.jit_function
        on_request(
            RecordedRequest(
                module=fn.module,
                qualname=fn.name,
                source_hash=source_hash(jit),
                key=str(key),
                specialization=compile["specialization_data"],
                target=target_name(jit.device_caches[compile["device"]][2]),
                autotuned=_autotuning(),
            )
        )

    with _observing_requests(observe, block=block):
        yield


class KernelNotFound(LookupError):
    """A recorded kernel cannot be found where it is built (``reason`` says why)."""

    def __init__(self, module: str, qualname: str, reason: str, fix: str = ""):
        fix = fix or "install the code that defines it where you build"
        super().__init__(f"{module}.{qualname}: {reason}; {fix}")
        self.module, self.qualname, self.reason, self.fix = module, qualname, reason, fix


def resolve_jit_function(module: str, qualname: str):
    """The JITFunction ``module.qualname`` names (through autotune and heuristics wrappers)."""
    if module == "__main__":  # importing it here would be another object than the server's
        raise KernelNotFound(
            module,
            qualname,
            "defined in the script the recorded process ran",
            "define it in a module the server imports, and record again",
        )
    fn = unwrapped(named_object(module, qualname), is_jit_function)
    if fn is None:
        raise KernelNotFound(module, qualname, "not a Triton JIT function")
    return fn


def named_object(module: str, qualname: str):
    """The object ``module.qualname`` names; KernelNotFound when the module cannot be imported
    here or does not define it."""
    try:
        obj = importlib.import_module(module)
    except Exception as exc:  # any import failure: the build host lacks the code
        raise KernelNotFound(module, qualname, f"cannot import {module}: {exc}") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise KernelNotFound(module, qualname, f"{module} has no {qualname}")
    return obj


def unwrapped(obj, wanted: Callable[[object], bool]):
    """``obj`` or the first object it wraps as ``.fn`` (Autotuner and Heuristics wrap the
    JITFunction so) for which ``wanted`` holds; None if none does."""
    for _ in range(8):
        if obj is None or wanted(obj):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def recorded_compile_hash(fn, specialization: str) -> str:
    """Triton's compile hash of a recorded request on the active driver, as ``compile()``
    computes it (source and dependencies, specialization, options, environment, toolchain)."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.runtime.cache import get_cache_key
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    backend = _backend_for(GPUTarget(target.backend, target.arch, target.warp_size))
    fn.device_caches[driver.active.get_current_device()]  # makes fn.ASTSource, as a launch does
    _, src = _unbound_source(fn, specialization)
    options = backend.parse_options(recorded_options(specialization))
    extra = src.parse_options()
    if extra:
        options = backend.parse_options(dict(options.__dict__, **extra))
    cache_key = get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
    return hashlib.sha256(cache_key.encode("utf-8")).hexdigest()


def recorded_options(specialization: str) -> dict:
    """The compile options of a recorded request (num_warps, num_stages, ...)."""
    options = json.loads(specialization)["options"]
    return {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}


def retarget_specialization(specialization: str, source_arch: int, arch: int) -> str:
    """A request recorded for ``source_arch`` as it would be asked for on ``arch``: every
    option the backend derives from the target (arch, fp8 dtypes, ...) that the request left at
    the source target's default takes the new target's default. The in-memory key is made of
    the launch's own options, so it stays; the code's own launch choices may still differ."""
    obj = json.loads(specialization)
    old = _backend_for(GPUTarget("cuda", source_arch, 32)).parse_options({}).__dict__
    new = _backend_for(GPUTarget("cuda", arch, 32)).parse_options({}).__dict__
    options = obj["options"]
    for name, value in new.items():
        was = old.get(name)
        if was != value and _same(options.get(name), was):
            options[name] = list(value) if isinstance(value, tuple) else value
    return json.dumps(obj)


def localized_specialization(specialization: str) -> str:
    """A recorded request with the host paths it names (libdevice, under the recording host's
    Triton) that do not exist here left to this host's Triton to fill in: Triton hashes those
    files' contents, not their paths, so the compile hash is the recording host's."""
    obj = json.loads(specialization)
    libs = obj["options"].get("extern_libs")
    if libs:
        kept = [[name, path] for name, path in libs if os.path.exists(path)]
        obj["options"]["extern_libs"] = kept or None
    return json.dumps(obj)


def _same(recorded, default) -> bool:
    return recorded == (list(default) if isinstance(default, tuple) else default)


def preload_recorded(fn, specialization: str):
    """Compile a recorded request for the active driver's target and put it in the JIT
    function's in-memory cache under the recorded key (Triton's own ``preload``)."""
    return fn.preload(specialization)


assert triton.__version__.startswith("3.6"), "written against Triton 3.6"
