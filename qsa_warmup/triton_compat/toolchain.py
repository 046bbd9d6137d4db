"""The toolchain parts of Triton's cache keys, and a memo of what Triton recomputes in every
fresh process (``triton_key()``, the ptxas version, its C-module platform key, the libcuda
folders), each keyed by the identity of the files it is computed from."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import sys
import sysconfig

import triton
import triton.runtime.build as _runtime_build
import triton.runtime.cache as _runtime_cache
from triton import knobs
from triton.backends.compiler import GPUTarget

from .. import knobs as qsa_knobs
from .._fs import atomic_write_json
from . import _patches
from .targets import target_name

__all__ = [
    "toolchain_parts",
    "install_memoized_toolchain_identity",
    "prime_toolchain_memo",
    "stat_identity",
    "stale_memo_files",
]


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


def _triton_key_inputs() -> list[str]:
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


def stat_identity(paths, extra: str = "") -> str:
    """A digest of each file's path, size, mtime, inode and ctime (and ``extra``)."""
    h = hashlib.sha256(f"{triton.__version__}\0{extra}".encode())
    for path in sorted(paths):
        st = os.stat(path)
        h.update(
            f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}\n".encode()
        )
    return h.hexdigest()


def _memo(memo_dir: str, name: str, identity: str, compute):
    path = os.path.join(memo_dir, f"{name}-{identity[:32]}.json")
    try:
        with open(path) as f:
            return json.load(f)["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = compute()
    try:
        atomic_write_json(path, {"value": value})
    except OSError:
        pass  # read-only or full: stay correct, just slower next time
    return value


def _identity(paths, extra: str = "") -> str | None:
    """:func:`stat_identity`, or None where this user may not stat a file (no memo then)."""
    try:
        return stat_identity(paths, extra)
    except OSError:
        return None


def _triton_key_identity() -> str | None:
    return _identity(_triton_key_inputs())


def _ptxas_identity(arch: int) -> str | None:
    # the files Triton may pick ptxas from (its knob's path, then the bundled binary), found
    # without running ptxas as get_ptxas() does (a subprocess: ms on a warm start)
    tool = type(knobs.nvidia).__dict__["ptxas_blackwell" if arch >= 100 else "ptxas"]
    paths = [p for p in (knobs.getenv(tool.key), tool.default_path) if p and os.path.exists(p)]
    return _identity(paths)


def _platform_key_identity() -> str | None:
    # machine() and system() are uname (cheap); architecture() is `file` on the interpreter
    # found on PATH (no `file`: other defaults), so both files are the identity
    tool = shutil.which("file")
    paths = [p for p in (os.path.realpath(sys.executable), tool) if p]
    return _identity(paths, f"{sys.executable}|{tool}|{platform.machine()}|{platform.system()}")


def _libcuda_dirs_identity() -> str | None:
    # ldconfig -p prints the linker cache; LD_LIBRARY_PATH is Triton's fallback
    paths = [p for p in ("/etc/ld.so.cache", "/sbin/ldconfig") if os.path.exists(p)]
    return _identity(paths, qsa_knobs.ld_library_path())


def _memo_identity(name: str) -> str | None:
    """The identity a memo named ``name`` (``triton_key``, ``ptxas90``, ...) has here, now."""
    if name.startswith("ptxas") and name[5:].isdigit():
        return _ptxas_identity(int(name[5:]))
    fixed = {
        "triton_key": _triton_key_identity,
        "platform_key": _platform_key_identity,
        "libcuda_dirs": _libcuda_dirs_identity,
    }
    return fixed[name]() if name in fixed else None


def stale_memo_files(memo_dir: str) -> list[str]:
    """The memo files in ``memo_dir`` this toolchain on this host would never read: computed
    for another Triton, ptxas, interpreter or linker cache (or not memo files at all)."""
    try:
        names = sorted(os.listdir(memo_dir))
    except OSError:
        return []
    stale = []
    for file_name in names:
        name, _, rest = file_name.rpartition("-")
        ident = _memo_identity(name) if rest.endswith(".json") else None
        if ident is None or rest != f"{ident[:32]}.json":
            stale.append(os.path.join(memo_dir, file_name))
    return stale


def install_memoized_toolchain_identity(memo_dir: str) -> None:
    """Make what Triton recomputes in every fresh process cheap on a warm start, by remembering
    it in ``memo_dir`` under the size, mtime, ctime and inode of every file it is computed from:
    ``triton_key()`` (hashes the whole 400 MB libtriton), the ptxas version (a subprocess), the
    platform key of its C-module cache (``platform.architecture()`` runs ``file`` on the
    interpreter: 12 ms on the H200 host) and the libcuda folders (``ldconfig -p``). Any change to
    one of those files, e.g. another Triton build, recomputes the value in full; so a key is
    never reused across toolchains. Install before Triton's driver starts (its utils module
    asks for the last two). Once per process (the first folder wins); ``restore()`` undoes it."""
    from triton.backends.nvidia import compiler as nv_compiler
    from triton.backends.nvidia import driver as nv_driver

    if _patches.is_replaced(_runtime_cache, "triton_key"):
        return
    original_key = _patches.original(_runtime_cache, "triton_key")
    original_ptxas = _patches.original(nv_compiler, "get_ptxas_version")
    original_platform_key = _patches.original(_runtime_build, "platform_key")
    original_libcuda_dirs = _patches.original(nv_driver, "libcuda_dirs")

    def memo(name, ident, compute):
        return compute() if ident is None else _memo(memo_dir, name, ident, compute)

    @functools.lru_cache()
    def triton_key_memo():
        return memo("triton_key", _triton_key_identity(), original_key)

    @functools.lru_cache()
    def ptxas_version_memo(arch: int = 80):
        return memo(f"ptxas{arch}", _ptxas_identity(arch), lambda: original_ptxas(arch))

    @functools.lru_cache()
    def platform_key_memo():
        return memo("platform_key", _platform_key_identity(), original_platform_key)

    @functools.lru_cache()
    def libcuda_dirs_memo():
        if knobs.nvidia.libcuda_path:  # Triton takes it as given, with no subprocess
            return original_libcuda_dirs()
        dirs = memo("libcuda_dirs", _libcuda_dirs_identity(), original_libcuda_dirs)
        if not any(os.path.exists(os.path.join(d, "libcuda.so.1")) for d in dirs):
            return original_libcuda_dirs()  # moved since: Triton's own lookup (and its message)
        return dirs

    _patches.replace(_runtime_cache, "triton_key", triton_key_memo)
    _patches.replace(nv_compiler, "get_ptxas_version", ptxas_version_memo)
    _patches.replace(_runtime_build, "platform_key", platform_key_memo)
    _patches.replace(nv_driver, "libcuda_dirs", libcuda_dirs_memo)


def prime_toolchain_memo(memo_dir: str, targets) -> None:
    """Compute, into ``memo_dir``, everything :func:`install_memoized_toolchain_identity`
    memoizes (for ``targets``), so that the first start on that folder finds it: ``import``
    does this as the install step of a host."""
    from triton.backends.nvidia import compiler as nv_compiler
    from triton.backends.nvidia import driver as nv_driver

    install_memoized_toolchain_identity(memo_dir)
    _runtime_cache.triton_key()
    for target in targets:
        try:
            nv_compiler.get_ptxas_version(target.arch)
        except Exception:
            pass  # no ptxas here: check reports it
    _runtime_build.platform_key()
    try:
        nv_driver.libcuda_dirs()
    except Exception:
        pass  # no libcuda here (a box without a GPU driver): the server computes its own
