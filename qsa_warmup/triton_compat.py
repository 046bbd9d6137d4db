"""Every Triton internal that qsa_warmup relies on, in one place (written against Triton 3.6).

- an offline driver, so ``JITFunction.warmup`` runs Triton's own binder and compiler for a named
  GPU target on a machine with no GPU (keys then equal the GPU server's);
- the in-memory cache key a launch requests (``jit_cache_hook``) and the compiled kernel's
  file-cache hash, metadata and resource needs;
- the toolchain parts of Triton's cache key (``triton_key()``, ptxas version, the
  cache-invalidating environment variables);
- the file cache's layout (``<dir>/<base32 hash>/``, ``__grp__*.json`` with absolute paths) and
  a cache manager that resolves those paths inside whatever folder the cache now lives in.

A Triton upgrade should touch this file only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime.cache import FileCacheManager, _base32, triton_key
from triton.runtime.driver import driver as _driver_config

__all__ = [
    "GPUTarget", "parse_target", "target_name", "current_gpu_target", "OfflineDriver", "active_driver",
    "RequestedVariant", "capture_requests", "compile_launch", "CompiledInfo", "compiled_info", "file_cache_dirname",
    "toolchain_parts", "triton_cache_dir", "use_triton_cache_dir", "compilation_listener", "RelocatingCacheManager",
    "group_file_paths", "repoint_group_file", "is_jit_function", "set_triton_cache", "set_active_target",
]

_TARGET_RE = re.compile(r"^sm_(\d+)a?$")


def parse_target(name: str) -> GPUTarget:
    """``"sm_90"`` -> GPUTarget("cuda", 90, 32). Raises ValueError on other spellings."""
    match = _TARGET_RE.match(name.strip())
    if not match:
        raise ValueError(f"target {name!r} is not a CUDA target name such as 'sm_90' or 'sm_100'")
    return GPUTarget("cuda", int(match.group(1)), 32)


def target_name(target: GPUTarget) -> str:
    return f"sm_{target.arch}"


def current_gpu_target() -> GPUTarget | None:
    """The target of the local GPU, or None on a machine without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return _driver_config.default.get_current_target()
    except Exception:  # a broken driver counts as no GPU: offline builds still work
        return None


def is_jit_function(fn) -> bool:
    return isinstance(fn, triton.runtime.jit.JITFunction)


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
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_benchmarker(self):
        raise RuntimeError("the offline driver cannot run kernels")


_driver_lock = threading.Lock()


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


@dataclass(frozen=True)
class RequestedVariant:
    """A specialization the runtime asked for: kernel name and Triton's in-memory cache key."""

    kernel: str
    key: str
    constants: str
    num_warps: int
    num_stages: int


def _variant_from_hook(fn, key, compile) -> RequestedVariant:
    constants = {str(k[0] if isinstance(k, tuple) and len(k) == 1 else k): v for k, v in compile["constants"].items()}
    return RequestedVariant(kernel=fn.name, key=str(key), constants=json.dumps(constants, sort_keys=True, default=str),
                            num_warps=compile["num_warps"], num_stages=compile["num_stages"])


@contextlib.contextmanager
def capture_requests(*, block: bool) -> Iterator[list[RequestedVariant]]:
    """Record every compile request Triton's runtime makes (``jit_cache_hook``).

    ``block=True`` answers each request with "skip": nothing is compiled or launched, which is
    how a planner learns a launch's key and how ``check --trace`` runs the launchers on CPU
    tensors."""
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


def compile_launch(launch):
    """Compile (or load from Triton's file cache) one launch without running it."""
    return launch.warmup()


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
    return CompiledInfo(name=kernel.name, hash=kernel.hash, shared=int(md.shared), num_warps=int(md.num_warps),
                        threads=int(threads), target=f"sm_{md.target.arch}")


def file_cache_dirname(compile_hash: str) -> str:
    return _base32(compile_hash)


def toolchain_parts(target: GPUTarget) -> dict[str, str]:
    """What Triton folds into every cache key besides the kernel: a change of any part means
    a cache built before cannot hit."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.nvidia.compiler import get_ptxas_version

    try:
        ptxas = get_ptxas_version(target.arch).strip().splitlines()[-1]
    except Exception as exc:  # no ptxas: nothing can be compiled, but check can still report
        ptxas = f"unavailable ({type(exc).__name__})"
    env = get_cache_invalidating_env_vars()
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "triton": triton.__version__,
        "triton_key": hashlib.sha256(triton_key().encode()).hexdigest()[:16],
        "ptxas": ptxas,
        "target": target_name(target),
        "env": json.dumps(dict(sorted(env.items()))),
    }


def triton_cache_dir() -> str | None:
    return knobs.cache.dir


@contextlib.contextmanager
def use_triton_cache_dir(path: str, manager_class=None) -> Iterator[None]:
    previous_dir, previous_cls = knobs.cache.dir, knobs.cache.manager_class
    knobs.cache.dir = path
    knobs.cache.manager_class = manager_class
    try:
        yield
    finally:
        knobs.cache.dir, knobs.cache.manager_class = previous_dir, previous_cls


@contextlib.contextmanager
def compilation_listener(callback: Callable[[str, bool], None]) -> Iterator[None]:
    """``callback(kernel_name, cache_hit)`` for every compile request that reaches compile()."""
    previous = knobs.compilation.listener

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        callback(metadata.get("name", "?"), cache_hit)
        if previous:
            previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)

    knobs.compilation.listener = listener
    try:
        yield
    finally:
        knobs.compilation.listener = previous


class RelocatingCacheManager(FileCacheManager):
    """Triton's file cache, reading group files by file name inside the entry's own folder.

    Triton's group files hold absolute paths, so a copied, unpacked or mounted cache misses
    silently; this manager resolves each child in the folder the group file is in."""

    def get_group(self, filename):
        grp_path = self._make_path(f"__grp__{filename}")
        try:
            with open(grp_path) as f:
                child_paths = json.load(f).get("child_paths")
        except (OSError, ValueError):
            return None
        if not isinstance(child_paths, dict):
            return None
        result = {}
        for child in child_paths:
            path = self._make_path(os.path.basename(child))
            if os.path.exists(path):
                result[child] = path
        return result


def group_file_paths(entry_dir: str) -> list[str]:
    return sorted(os.path.join(entry_dir, n) for n in os.listdir(entry_dir) if n.startswith("__grp__"))


def repoint_group_file(path: str) -> bool:
    """Rewrite a group file's child paths to its own folder (atomic). True if it changed."""
    with open(path) as f:
        data = json.load(f)
    children = data.get("child_paths") or {}
    folder = os.path.dirname(os.path.abspath(path))
    fixed = {name: os.path.join(folder, os.path.basename(p)) for name, p in children.items()}
    if fixed == children:
        return False
    data["child_paths"] = fixed
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    return True


def set_triton_cache(path: str, manager_class=None) -> None:
    """Point this process's Triton file cache at ``path`` (for worker processes)."""
    knobs.cache.dir = path
    knobs.cache.manager_class = manager_class or RelocatingCacheManager


def set_active_target(target: GPUTarget | None) -> None:
    """Make the offline driver for ``target`` active for the rest of this process."""
    if target is not None:
        _driver_config.set_active(OfflineDriver(target))
