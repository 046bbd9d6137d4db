"""Binding a launch as Triton's runtime does (in-memory key, compile hash, binding data), and
putting a compiled kernel into a JIT function's in-memory cache straight from verified files."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from typing import NamedTuple

import triton
import triton.runtime.cache as _runtime_cache
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver as _driver_config

__all__ = [
    "is_jit_function",
    "CompiledInfo",
    "compiled_info",
    "compile_hash_of",
    "bind_launch",
    "LaunchBinding",
    "specialization_data",
    "binding_knobs",
    "settle_kernel_hashes",
    "compiled_kernel_from_files",
    "load_from_entry",
    "forget_compiled",
]


def is_jit_function(fn) -> bool:
    return isinstance(fn, triton.runtime.jit.JITFunction)


@dataclass(frozen=True)
class CompiledInfo:
    name: str
    hash: str  # Triton's compile hash (hex); the file-cache folder is its base32 form
    shared: int
    num_warps: int
    threads: int
    target: str


def compiled_info(kernel) -> CompiledInfo:
    md = kernel.metadata
    threads = md.num_warps * md.target.warp_size * getattr(md, "num_ctas", 1)
    return CompiledInfo(
        name=kernel.name,
        hash=kernel.hash,
        shared=int(md.shared),
        num_warps=int(md.num_warps),
        threads=int(threads),
        target=f"sm_{md.target.arch}",
    )


def _bind(launch, with_hash: bool = True):
    """(in-memory cache, in-memory key, ASTSource, options, compile hash) of ``launch`` on the
    active driver, computed exactly as ``JITFunction.run`` and ``compile()`` compute them. The
    hash (the kernel's source and dependencies hashed: most of the cost) is None unless
    ``with_hash``."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.runtime.jit import compute_cache_key

    fn = launch.kernel
    device = _driver_config.active.get_current_device()
    kernel_cache, kernel_key_cache, target, backend, binder = fn.device_caches[device]
    kwargs = dict(launch.options)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    bound_args, specialization, options = binder(*launch.args, **kwargs)
    key = compute_cache_key(kernel_key_cache, specialization, options)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, kwargs, bound_args, specialization, options
    )
    src = fn.ASTSource(fn, signature, constexprs, attrs)
    extra = src.parse_options()
    if extra:  # as compile() does; ASTSource adds nothing
        options = backend.parse_options(dict(options.__dict__, **extra))
    if not with_hash:
        return kernel_cache, key, src, options, None
    cache_key = _runtime_cache.get_cache_key(
        src, backend, options, env_vars=get_cache_invalidating_env_vars()
    )
    return kernel_cache, key, src, options, hashlib.sha256(cache_key.encode("utf-8")).hexdigest()


def compile_hash_of(launch) -> str:
    """Triton's compile hash for ``launch`` (its file-cache folder, in hex): kernel source and
    dependencies, specialization, options, environment and toolchain. Compiles nothing."""
    return _bind(launch)[4]


class LaunchBinding(NamedTuple):
    """What a plan records of one launch, from one pass of Triton's binder."""

    kernel: str  # the name ``jit_cache_hook`` is given
    key: str  # the in-memory cache key it requests
    compile_hash: str  # :func:`compile_hash_of`
    specialization: str  # :func:`specialization_data`


def bind_launch(launch) -> LaunchBinding:
    """``launch`` bound on the active driver. Computed from the binder, so the key is the same
    whether or not the kernel is already in memory (a second warmup in one process)."""
    _, key, src, options, compile_hash = _bind(launch)
    return LaunchBinding(
        launch.kernel.fn.__qualname__, str(key), compile_hash, _serialize(launch, key, src, options)
    )


def specialization_data(launch) -> str:
    """``launch``'s binding on the active driver (in-memory key, signature, constexprs,
    attributes, options) in Triton's own serialization (``JITFunction.preload``'s input), so
    a later process can fill the in-memory cache without calling Triton's binder, whose first
    call imports ``triton.experimental.gluon`` (80-100 ms on the H200 host)."""
    _, key, src, options, _ = _bind(launch, with_hash=False)
    return _serialize(launch, key, src, options)


def _serialize(launch, key, src, options) -> str:
    from triton.runtime.jit import serialize_specialization_data

    return serialize_specialization_data(
        launch.kernel._fn_name, src.signature, src.constants, src.attrs, options, key
    )


def binding_knobs() -> str:
    """Knobs outside the toolchain fingerprint that Triton's binder folds into in-memory keys."""
    return f"debug={knobs.runtime.debug},instr={knobs.compilation.instrumentation_mode}"


_settled: set = set()


def settle_kernel_hashes(fns) -> None:
    """Make Triton's source hashes of ``fns`` (every JIT function of a package, helpers
    included) independent of which of them this process hashed first.

    ``JITFunction.cache_key`` folds in the constexpr globals of the helpers a kernel calls only
    when those helpers were hashed before it (``DependenciesFinder._update_hash`` merges a
    callee's ``used_global_vals`` before computing the callee's key), so one kernel can hash
    differently in two processes (a prebuild's entry would be refused at a server's start).
    Recomputing every key until none changes gives each key all of its helpers' globals,
    whatever hashed first. Once per process for a given set of functions."""
    fns = [fn for fn in fns if is_jit_function(fn)]
    ident = frozenset(id(fn) for fn in fns)
    if ident in _settled:
        return
    previous = None
    for _ in range(16):  # call depth bounds the passes
        for fn in fns:
            fn.hash = None
        current = [fn.cache_key for fn in fns]
        if current == previous:
            break
        previous = current
    else:
        raise RuntimeError("Triton's kernel hashes did not settle")
    _settled.add(ident)


def forget_compiled(fns) -> None:
    """Empty the in-memory caches of ``fns``, so their next warmup compiles (a build worker
    forked from a process that already holds the kernels must still write their files)."""
    for fn in fns:
        if is_jit_function(fn):
            fn.device_caches.clear()


@functools.lru_cache(maxsize=None)
def _metadata_class(fields: tuple):
    from collections import namedtuple

    return namedtuple("KernelMetadata", fields)


@functools.lru_cache(maxsize=None)
def _backend_for(target: GPUTarget):
    from triton.compiler.compiler import make_backend

    return make_backend(target)


def compiled_kernel_from_files(
    src, metadata_group: dict, compile_hash: str, contents: dict | None = None
):
    """What ``CompiledKernel(src, metadata_group, hash)`` builds, with the metadata class and the
    backend made once per field set / target instead of once per kernel (a third of the warm
    load time). ``tests/test_offline_compile.py`` checks it equals Triton's constructor.
    ``contents``: file bytes by path, already read (and verified) by the caller."""
    from triton.compiler.compiler import AsmDict, CompiledKernel

    contents = contents or {}

    def read(path):
        data = contents.get(path)
        if data is None:
            with open(path, "rb") as f:
                data = f.read()
        return data

    metadata_path = next(p for name, p in metadata_group.items() if name.endswith(".json"))
    metadata = json.loads(read(metadata_path))
    t = metadata["target"]
    metadata["target"] = GPUTarget(t["backend"], t["arch"], t["warp_size"])
    kernel = CompiledKernel.__new__(CompiledKernel)
    kernel.metadata = _metadata_class(tuple(sorted(metadata)))(**metadata)
    backend = _backend_for(kernel.metadata.target)
    kernel.packed_metadata = backend.pack_metadata(kernel.metadata)
    kernel.src = src
    kernel.hash = compile_hash
    kernel.name = kernel.metadata.name
    asm = AsmDict()
    for name, path in metadata_group.items():
        if name.endswith(".json"):
            continue
        ext = os.path.splitext(name)[1][1:]
        data = read(path)
        asm[ext] = data if ext == backend.binary_ext else data.decode()
    kernel.asm = asm
    kernel.metadata_group = metadata_group
    kernel.kernel = asm[backend.binary_ext]
    kernel.module = kernel.function = kernel._run = None
    return kernel


def _unbound_source(fn, data: str):
    """(in-memory key, ASTSource) from :func:`specialization_data`, decoded as
    ``JITFunction.preload`` decodes it."""
    import triton.language as tl
    from triton.runtime.jit import convert_to_tuple_if_list

    obj = json.loads(data)
    if obj["name"] != fn._fn_name:
        raise ValueError(f"specialization data is for {obj['name']}, not {fn._fn_name}")
    constexprs = {
        tuple(k): tl.dtype(v)
        if tl.dtype.is_dtype(v)
        else tl.constexpr(v["constexpr"])
        if isinstance(v, dict) and "constexpr" in v
        else v
        for k, v in zip(obj["constant_keys"], obj["constant_vals"])
    }
    attrs = dict(zip(map(tuple, obj["attrs_keys"]), obj["attrs_vals"]))
    signature = {k: convert_to_tuple_if_list(v) for k, v in obj["signature"].items()}
    return obj["key"], fn.ASTSource(fn, signature, constexprs, attrs)


def load_from_entry(
    launch,
    folder: str,
    files,
    compile_hash: str,
    planned_hash: str | None = None,
    specialization: str | None = None,
    contents: dict | None = None,
):
    """Put ``launch``'s kernel into its JIT function's in-memory cache straight from a verified
    entry folder, without Triton's ``compile()`` (no group-file lookup, no listener).

    ``compile_hash`` is the entry's. ``planned_hash`` is Triton's compile hash for this launch
    as the plan computed it under the current toolchain and kernel source (a plan memo is keyed
    by both); given, it stands for the current hash, else the hash is computed now.
    ``specialization`` (:func:`specialization_data`, memoized with the plan) stands for the
    binder's work when given with ``planned_hash``. ``contents``: file bytes by path, as the
    caller verified them. Returns the CompiledKernel (the one already in memory, if any), or
    None when the current hash is not ``compile_hash``: the caller then takes Triton's path."""
    if planned_hash and specialization:
        fn = launch.kernel
        kernel_cache = fn.device_caches[_driver_config.active.get_current_device()][0]
        key, src = _unbound_source(fn, specialization)
        current_hash = planned_hash
    else:
        kernel_cache, key, src, options, current_hash = _bind(launch, with_hash=not planned_hash)
        current_hash = planned_hash or current_hash
    kernel = kernel_cache.get(key)
    if kernel is not None:
        return kernel
    if current_hash != compile_hash:
        return None
    group = {name: os.path.join(folder, name) for name in files if not name.startswith("__grp__")}
    if not any(name.endswith(".json") for name in group):
        return None
    kernel = compiled_kernel_from_files(src, group, compile_hash, contents)
    if getattr(kernel.metadata, "hash", compile_hash) != compile_hash:
        return None
    kernel_cache[key] = kernel
    return kernel
