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
import functools
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
import triton.runtime.cache as _runtime_cache
from triton.runtime.cache import FileCacheManager, _base32, triton_key
from triton.runtime.driver import driver as _driver_config

__all__ = [
    "GPUTarget", "parse_target", "target_name", "current_gpu_target", "OfflineDriver", "active_driver",
    "RequestedVariant", "capture_requests", "compile_launch", "CompiledInfo", "compiled_info", "file_cache_dirname",
    "toolchain_parts", "triton_cache_dir", "use_triton_cache_dir", "compilation_listener", "RelocatingCacheManager",
    "group_file_paths", "repointed_group", "repoint_group_file", "is_jit_function", "set_triton_cache", "set_active_target",
    "make_layered_manager", "install_cache_manager", "store_binaries_only", "install_memoized_toolchain_identity",
    "device_context", "init_handles", "share_launcher_modules", "prepare_launchers", "install_jit_cache_hook",
    "forced_compile", "load_from_entry", "compiled_kernel_from_files", "compile_hash_of",
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
    # constants are keyed by argument path, e.g. (6,); name them after the kernel's parameters
    names = fn.jit_function.arg_names

    def name(path):
        if isinstance(path, tuple) and len(path) == 1 and path[0] < len(names):
            return names[path[0]]
        return str(path)
    constants = {name(k): v for k, v in compile["constants"].items()}
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
    from triton.backends.nvidia import compiler as nv_compiler

    try:
        ptxas = nv_compiler.get_ptxas_version(target.arch).strip().splitlines()[-1]
    except Exception as exc:  # no ptxas: nothing can be compiled, but check can still report
        ptxas = f"unavailable ({type(exc).__name__})"
    env = get_cache_invalidating_env_vars()
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "triton": triton.__version__,
        "triton_key": hashlib.sha256(_runtime_cache.triton_key().encode()).hexdigest()[:16],
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


def repointed_group(path: str) -> tuple[dict, bool]:
    """A group file's content with its child paths moved into the group's own folder, and
    whether that changed anything (unreadable files count as unchanged and empty)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {"child_paths": {}}, False
    children = data.get("child_paths") if isinstance(data, dict) else None
    if not isinstance(children, dict):
        return {"child_paths": {}}, False
    folder = os.path.dirname(os.path.abspath(path))
    fixed = {name: os.path.join(folder, os.path.basename(p)) for name, p in children.items()}
    return {**data, "child_paths": fixed}, fixed != children


def repoint_group_file(path: str) -> bool:
    """Rewrite a group file's child paths to its own folder (atomic). True if it changed."""
    data, changed = repointed_group(path)
    if not changed:
        return False
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


# -- serving-side cache manager -----------------------------------------------------------

def make_layered_manager(primary: str, overlay: str | None, memory: Callable[[], str], blocked: set,
                         on_write_failure: Callable[[str, OSError], None]):
    """A cache manager class for a serving process.

    Reads: ``primary``, then ``overlay`` (group files resolved by name, so moved copies hit);
    folders in ``blocked`` (failed checksums) are misses, so Triton compiles instead of
    loading them (the overlay's own copy still counts). Writes: ``primary``; on an OSError (read-only, disk full) the ``overlay``;
    then a memory-backed folder from ``memory()``, so a compile always leaves loadable files."""

    class LayeredCacheManager(RelocatingCacheManager):
        def __init__(self, key, override=False, dump=False):
            if override or dump:
                super().__init__(key, override=override, dump=dump)
                return
            self.key = key
            self.lock_path = None
            self._roots = [r for r in (primary, overlay) if r]
            self.cache_dir = os.path.join(primary, key)

        def _existing(self, filename):
            for root in self._roots:
                if root == primary and self.key in blocked:
                    continue  # failed its checksums here: never load it
                path = os.path.join(root, self.key, filename)
                if os.path.exists(path):
                    return path
            return None

        def has_file(self, filename):
            return self._existing(filename) is not None

        def get_file(self, filename):
            return self._existing(filename)

        def get_group(self, filename):
            grp = self._existing(f"__grp__{filename}")
            if grp is None:
                return None
            self.cache_dir = os.path.dirname(grp)
            return super().get_group(filename)

        def put(self, data, filename, binary=True):
            last = None
            for root in self._roots + [None]:
                folder = os.path.join(root if root else memory(), self.key)
                try:
                    os.makedirs(folder, exist_ok=True)
                    self.cache_dir, self.lock_path = folder, os.path.join(folder, "lock")
                    return FileCacheManager.put(self, data, filename, binary)
                except OSError as exc:
                    last = exc
                    on_write_failure(folder, exc)
            raise last

        def put_group(self, filename, group):
            # the group must sit beside its children: write it where the last child went
            self.cache_dir = os.path.dirname(next(iter(group.values()))) if group else self.cache_dir
            self.lock_path = os.path.join(self.cache_dir, "lock")
            try:
                return FileCacheManager.put_group(self, filename, group)
            except OSError as exc:
                on_write_failure(self.cache_dir, exc)
                mem = os.path.join(memory(), self.key)
                os.makedirs(mem, exist_ok=True)
                moved = {}
                for name, path in group.items():
                    target = os.path.join(mem, os.path.basename(path))
                    if os.path.abspath(path) != target:
                        with open(path, "rb") as src, open(target, "wb") as dst:
                            dst.write(src.read())
                    moved[name] = target
                self.cache_dir, self.lock_path = mem, os.path.join(mem, "lock")
                return FileCacheManager.put_group(self, filename, moved)

    return LayeredCacheManager


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


def install_cache_manager(manager_class, triton_dir: str) -> None:
    knobs.cache.dir = triton_dir
    knobs.cache.manager_class = manager_class


def store_binaries_only(enabled: bool = True) -> None:
    """Keep only the binary and metadata of each compile (no IR): smaller, faster-loading cache.
    Not part of Triton's cache key, so plain Triton processes hit such entries too."""
    knobs.compilation.store_binary_only = enabled


# -- fast toolchain identity -----------------------------------------------------------------

def _triton_key_inputs() -> list[str]:
    import sysconfig

    root = os.path.dirname(os.path.abspath(triton.__file__))
    # every module file under the packages triton_key() walks (a superset of what it hashes:
    # any change there recomputes the key), listed without importing them as pkgutil would
    files = [os.path.join(root, "runtime", "cache.py")]
    for sub in ("compiler", "backends", "language"):
        for folder, dirs, names in os.walk(os.path.join(root, sub)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "include", "bin", "lib")]
            files.extend(os.path.join(folder, n) for n in names if n.endswith((".py", ".so")))
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    files.append(os.path.join(root, "_C", f"libtriton.{ext}"))
    return files


def _stat_identity(paths, extra: str = "") -> str:
    h = hashlib.sha256(f"{triton.__version__}\0{extra}".encode())
    for path in sorted(paths):
        st = os.stat(path)
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


def install_memoized_toolchain_identity(memo_dir: str) -> None:
    """Make what Triton recomputes in every fresh process cheap on a warm start, by remembering
    it in ``memo_dir`` under the size, mtime, ctime and inode of every file it is computed from:
    ``triton_key()`` (hashes the whole 400 MB libtriton), the ptxas version (a subprocess), the
    platform key of its C-module cache (``platform.architecture()`` runs ``file`` on the
    interpreter: 12 ms on the H200 host) and the libcuda folders (``ldconfig -p``). Any change to
    one of those files, e.g. another Triton build, recomputes the value in full; so a key is
    never reused across toolchains. Install before Triton's driver starts (its utils module
    asks for the last two)."""
    import platform
    import shutil

    import triton.runtime.build as runtime_build
    import triton.runtime.cache as runtime_cache
    from triton.backends.nvidia import compiler as nv_compiler
    from triton.backends.nvidia import driver as nv_driver

    from . import knobs as qsa_knobs

    if getattr(runtime_cache.triton_key, "_qsa_memo", False):
        return
    original_key, original_ptxas = runtime_cache.triton_key, nv_compiler.get_ptxas_version
    original_platform_key, original_libcuda_dirs = runtime_build.platform_key, nv_driver.libcuda_dirs

    def memo(name, identity, compute):
        path = os.path.join(memo_dir, f"{name}-{identity[:32]}.json")
        try:
            with open(path) as f:
                return json.load(f)["value"]
        except (OSError, ValueError, KeyError):
            pass
        value = compute()
        try:
            os.makedirs(memo_dir, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"value": value}, f)
            os.replace(tmp, path)
        except OSError:
            pass  # read-only or full: stay correct, just slower next time
        return value

    @functools.lru_cache()
    def triton_key_memo():
        return memo("triton_key", _stat_identity(_triton_key_inputs()), original_key)

    @functools.lru_cache()
    def ptxas_version_memo(arch: int = 80):
        # the files Triton may pick ptxas from (its knob's path, then the bundled binary),
        # found without running ptxas as get_ptxas() does (a subprocess: ms on a warm start)
        tool = type(knobs.nvidia).__dict__["ptxas_blackwell" if arch >= 100 else "ptxas"]
        paths = [p for p in (knobs.getenv(tool.key), tool.default_path) if p and os.path.exists(p)]
        return memo(f"ptxas{arch}", _stat_identity(paths), lambda: original_ptxas(arch))

    @functools.lru_cache()
    def platform_key_memo():
        # machine() and system() are uname (cheap); architecture() is `file` on the interpreter
        # found on PATH (no `file`: other defaults), so both files are the identity
        tool = shutil.which("file")
        paths = [p for p in (os.path.realpath(sys.executable), tool) if p]
        extra = f"{sys.executable}|{tool}|{platform.machine()}|{platform.system()}"
        return memo("platform_key", _stat_identity(paths, extra), original_platform_key)

    @functools.lru_cache()
    def libcuda_dirs_memo():
        if knobs.nvidia.libcuda_path:  # Triton takes it as given, with no subprocess
            return original_libcuda_dirs()
        # ldconfig -p prints the linker cache; LD_LIBRARY_PATH is Triton's fallback
        paths = [p for p in ("/etc/ld.so.cache", "/sbin/ldconfig") if os.path.exists(p)]
        dirs = memo("libcuda_dirs", _stat_identity(paths, qsa_knobs.ld_library_path()), original_libcuda_dirs)
        if not any(os.path.exists(os.path.join(d, "libcuda.so.1")) for d in dirs):
            return original_libcuda_dirs()  # moved since: Triton's own lookup (and its message)
        return dirs

    triton_key_memo._qsa_memo = True
    runtime_cache.triton_key = triton_key_memo
    nv_compiler.get_ptxas_version = ptxas_version_memo
    runtime_build.platform_key = platform_key_memo
    nv_driver.libcuda_dirs = libcuda_dirs_memo
    globals()["triton_key"] = triton_key_memo


def jit_function_module(fn_info) -> str:
    return getattr(fn_info, "module", "") or ""


@contextlib.contextmanager
def device_context(index: int | None):
    if index is None:
        yield
        return
    import torch

    with torch.cuda.device(index):
        yield


@functools.lru_cache(maxsize=None)
def _metadata_class(fields: tuple):
    from collections import namedtuple

    return namedtuple("KernelMetadata", fields)


@functools.lru_cache(maxsize=None)
def _backend_for(target: GPUTarget):
    from triton.compiler.compiler import make_backend

    return make_backend(target)


def compiled_kernel_from_files(src, metadata_group: dict, compile_hash: str, contents: dict | None = None):
    """What ``CompiledKernel(src, metadata_group, hash)`` builds, with the metadata class and the
    backend made once per field set / target instead of once per kernel (a third of the warm
    load time). ``tests/test_offline_compile.py`` checks it equals Triton's constructor."""
    from triton.compiler.compiler import AsmDict, CompiledKernel

    contents = contents or {}

    def read(path):  # bytes already read (and verified) by the caller, else from the file
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
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    src = fn.ASTSource(fn, signature, constexprs, attrs)
    extra = src.parse_options()
    if extra:  # as compile() does; ASTSource adds nothing
        options = backend.parse_options(dict(options.__dict__, **extra))
    if not with_hash:
        return kernel_cache, key, src, options, None
    cache_key = _runtime_cache.get_cache_key(src, backend, options, env_vars=get_cache_invalidating_env_vars())
    return kernel_cache, key, src, options, hashlib.sha256(cache_key.encode("utf-8")).hexdigest()


def compile_hash_of(launch) -> str:
    """Triton's compile hash for ``launch`` (its file-cache folder, in hex): kernel source and
    dependencies, specialization, options, environment and toolchain. Compiles nothing."""
    return _bind(launch)[4]


_settled: set = set()


def settle_kernel_hashes(fns) -> None:
    """Make Triton's source hashes of ``fns`` (every JIT function of a package, helpers
    included) independent of which of them this process hashed first.

    ``JITFunction.cache_key`` folds in the constexpr globals of the helpers a kernel calls only
    when those helpers were hashed before it (``DependenciesFinder._update_hash`` merges a
    callee's ``used_global_vals`` before computing the callee's key), so one kernel can hash
    differently in two processes (seen: a prebuild's entry refused at a server's start).
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


def specialization_data(launch) -> str:
    """``launch``'s binding on the active driver (in-memory key, signature, constexprs,
    attributes, options) in Triton's own serialization (``JITFunction.preload``'s input), so
    a later process can fill the in-memory cache without calling Triton's binder, whose first
    call imports ``triton.experimental.gluon`` (80-100 ms on the H200 host)."""
    from triton.runtime.jit import serialize_specialization_data

    _, key, src, options, _ = _bind(launch, with_hash=False)
    return serialize_specialization_data(launch.kernel._fn_name, src.signature, src.constants, src.attrs, options,
                                         key)


def _unbound_source(fn, data: str):
    """(in-memory key, ASTSource) from :func:`specialization_data`, decoded as
    ``JITFunction.preload`` decodes it."""
    import triton.language as tl
    from triton.runtime.jit import convert_to_tuple_if_list

    obj = json.loads(data)
    if obj["name"] != fn._fn_name:
        raise ValueError(f"specialization data is for {obj['name']}, not {fn._fn_name}")
    constexprs = {
        tuple(k): tl.dtype(v) if tl.dtype.is_dtype(v) else
        tl.constexpr(v["constexpr"]) if isinstance(v, dict) and "constexpr" in v else v
        for k, v in zip(obj["constant_keys"], obj["constant_vals"])
    }
    attrs = dict(zip(map(tuple, obj["attrs_keys"]), obj["attrs_vals"]))
    signature = {k: convert_to_tuple_if_list(v) for k, v in obj["signature"].items()}
    return obj["key"], fn.ASTSource(fn, signature, constexprs, attrs)


def load_from_entry(launch, folder: str, files, compile_hash: str, planned_hash: str | None = None,
                    specialization: str | None = None, contents: dict | None = None):
    """Put ``launch``'s kernel into its JIT function's in-memory cache straight from a verified
    entry folder, without Triton's ``compile()`` (no group-file lookup, no listener).

    ``compile_hash`` is the entry's. ``planned_hash`` is Triton's compile hash for this launch
    as the plan computed it under the current toolchain and kernel source (a plan memo is keyed
    by both); given, it stands for the current hash, else the hash is computed now.
    ``specialization`` (:func:`specialization_data`, memoized with the plan) stands for the
    binder's work when given with ``planned_hash``. ``contents``: file bytes by path, as the
    caller verified them. Returns the CompiledKernel (the one already
    in memory, if any), or None when the current hash is not ``compile_hash``: the caller then
    takes Triton's normal path."""
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


def binding_knobs() -> str:
    """Knobs outside the toolchain fingerprint that Triton's binder folds into in-memory keys."""
    return f"debug={knobs.runtime.debug},instr={knobs.compilation.instrumentation_mode}"


_c_modules: dict = {}
_launcher_sources: dict = {}


def share_launcher_modules() -> None:
    """Make each distinct C launcher once per process. Triton makes one launcher per kernel:
    it generates its C source from the signature, then loads the module from the file cache
    (source hash, file lookup, module init); the default plan's 36 kernels have 7 distinct
    launchers. The module is what Triton would load from the same file, and a source is
    reused only for equal arguments, so sharing changes nothing else."""
    from triton.backends.nvidia import driver as nv_driver

    original, original_source = nv_driver.compile_module_from_src, nv_driver.make_launcher
    if getattr(original, "_qsa_shared", False):
        return

    def shared(src, name, library_dirs=None, include_dirs=None, libraries=None, ccflags=None):
        key = (src, name, *(tuple(v or ()) for v in (library_dirs, include_dirs, libraries, ccflags)))
        module = _c_modules.get(key)
        if module is None:
            module = original(src=src, name=name, library_dirs=library_dirs, include_dirs=include_dirs,
                              libraries=libraries, ccflags=ccflags)
            _c_modules[key] = module
        return module

    def shared_source(constants, signature, tensordesc_meta):
        key = repr((constants, signature, tensordesc_meta))  # repr: True and 1 stay apart
        source = _launcher_sources.get(key)
        if source is None:
            source = _launcher_sources[key] = original_source(constants, signature, tensordesc_meta)
        return source

    shared._qsa_shared = True
    nv_driver.compile_module_from_src = shared
    nv_driver.make_launcher = shared_source


def _launcher_source(kernel) -> str:
    """The C source of ``kernel``'s launcher, made as ``CudaLauncher.__init__`` makes it."""
    from triton.backends.nvidia import driver as nv_driver

    src = kernel.src
    constants = getattr(src, "constants", {})
    index = {name: (src.fn.arg_names.index(name),) for name in constants if isinstance(name, str)}
    constants = {index.get(idx, idx): value for idx, value in constants.items()}
    return nv_driver.make_launcher(constants, dict(src.signature), getattr(kernel.metadata, "tensordesc_meta", None))


def _launcher_key(source: str) -> str:
    """The file-cache key ``compile_module_from_src`` gives a C module's source."""
    import triton.runtime.build as runtime_build

    return hashlib.sha256((source + runtime_build.platform_key()).encode("utf-8")).hexdigest()


def _launcher_in_file_cache(source: str) -> bool:
    """Whether Triton's ``compile_module_from_src`` would load this launcher, not build it."""
    import sysconfig

    from triton.runtime.cache import get_cache_manager

    name = f"__triton_launcher{sysconfig.get_config_var('EXT_SUFFIX')}"
    return get_cache_manager(_launcher_key(source)).get_file(name) is not None


def prepare_launchers(kernels, jobs: int,
                      guard: Callable[[str], contextlib.AbstractContextManager] | None = None) -> int:
    """Build the C launcher modules that loading ``kernels`` will ask for and the file cache
    lacks (a cold cache, or one prebuilt on a machine without a GPU), the distinct ones in up
    to ``jobs`` threads at once: a build is a C compiler run (~0.3 s), which the threads wait
    on with the GIL released. ``guard(key)``, if given, is held around each build (a lock
    shared by the processes that start together: one builds, the others then find the file).
    Returns how many this process built. Best effort: what fails here fails again, and is
    reported, in the kernel's own load."""
    from concurrent.futures import ThreadPoolExecutor

    from triton.backends.nvidia import driver as nv_driver

    seen, missing = set(), []
    for kernel in kernels:
        try:
            source = _launcher_source(kernel)
            if source not in seen:
                seen.add(source)
                if not _launcher_in_file_cache(source):
                    missing.append(source)
        except Exception:
            continue

    def build(source) -> bool:
        try:
            with guard(_launcher_key(source)) if guard else contextlib.nullcontext():
                if _launcher_in_file_cache(source):  # another process built it meanwhile
                    return False
                # with the arguments CudaLauncher passes: its lookup then hits what this made
                nv_driver.compile_module_from_src(src=source, name="__triton_launcher",
                                                  library_dirs=nv_driver.library_dirs(),
                                                  include_dirs=nv_driver.include_dirs, libraries=nv_driver.libraries)
            return True
        except Exception:
            return False

    if not missing:
        return 0
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(missing)))) as pool:
        return sum(pool.map(build, missing))


def init_handles(kernel) -> None:
    """Load the compiled binary onto the current GPU now, not at the first launch."""
    kernel._init_handles()


def install_jit_cache_hook(hook) -> Callable:
    """Install ``hook(kernel_name, module, constants, num_warps, key)`` -> bool (True: skip compile).
    Returns the previous hook, which the new one chains to."""
    previous = knobs.runtime.jit_cache_hook

    def wrapper(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        variant = _variant_from_hook(fn, key, compile)
        if hook(variant, fn.module):
            return True
        if previous:
            return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                            already_compiled=already_compiled)
        return False

    knobs.runtime.jit_cache_hook = wrapper
    return previous
