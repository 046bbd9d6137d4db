"""Triton's C launchers: one module per distinct launcher per process, the missing ones built
at once before the kernels load, and binaries put onto the GPU before the first launch."""

from __future__ import annotations

import contextlib
import hashlib
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from . import _patches

__all__ = [
    "share_launcher_modules",
    "prepare_launchers",
    "init_handles",
    "launcher_in_file_cache",
]

_c_modules: dict = {}
_launcher_sources: dict = {}


def share_launcher_modules() -> None:
    """Make each distinct C launcher once per process. Triton makes one launcher per kernel:
    it generates its C source from the signature, then loads the module from the file cache
    (source hash, file lookup, module init); the default plan's 36 kernels have 7 distinct
    launchers. The module is what Triton would load from the same file, and a source is
    reused only for equal arguments, so sharing changes nothing else."""
    from triton.backends.nvidia import driver as nv_driver

    if _patches.is_replaced(nv_driver, "compile_module_from_src"):
        return
    original = _patches.original(nv_driver, "compile_module_from_src")
    original_source = _patches.original(nv_driver, "make_launcher")

    def shared(src, name, library_dirs=None, include_dirs=None, libraries=None, ccflags=None):
        key = (
            src,
            name,
            *(tuple(v or ()) for v in (library_dirs, include_dirs, libraries, ccflags)),
        )
        module = _c_modules.get(key)
        if module is None:
            module = original(
                src=src,
                name=name,
                library_dirs=library_dirs,
                include_dirs=include_dirs,
                libraries=libraries,
                ccflags=ccflags,
            )
            _c_modules[key] = module
        return module

    def shared_source(constants, signature, tensordesc_meta):
        key = repr((constants, signature, tensordesc_meta))  # repr: True and 1 stay apart
        source = _launcher_sources.get(key)
        if source is None:
            source = _launcher_sources[key] = original_source(constants, signature, tensordesc_meta)
        return source

    _patches.replace(nv_driver, "compile_module_from_src", shared)
    _patches.replace(nv_driver, "make_launcher", shared_source)


def _launcher_source(kernel) -> str:
    """The C source of ``kernel``'s launcher, made as ``CudaLauncher.__init__`` makes it."""
    from triton.backends.nvidia import driver as nv_driver

    src = kernel.src
    constants = getattr(src, "constants", {})
    index = {name: (src.fn.arg_names.index(name),) for name in constants if isinstance(name, str)}
    constants = {index.get(idx, idx): value for idx, value in constants.items()}
    return nv_driver.make_launcher(
        constants, dict(src.signature), getattr(kernel.metadata, "tensordesc_meta", None)
    )


def _launcher_key(source: str) -> str:
    """The file-cache key ``compile_module_from_src`` gives a C module's source."""
    import triton.runtime.build as runtime_build

    return hashlib.sha256((source + runtime_build.platform_key()).encode("utf-8")).hexdigest()


def launcher_in_file_cache(source: str) -> bool:
    """Whether Triton's ``compile_module_from_src`` would load this launcher, not build it."""
    from triton.runtime.cache import get_cache_manager

    name = f"__triton_launcher{sysconfig.get_config_var('EXT_SUFFIX')}"
    return get_cache_manager(_launcher_key(source)).get_file(name) is not None


def prepare_launchers(
    kernels, jobs: int, guard: Callable[[str], contextlib.AbstractContextManager] | None = None
) -> int:
    """Build the C launcher modules that loading ``kernels`` will ask for and the file cache
    lacks (a cold cache, or one prebuilt on a machine without a GPU), the distinct ones in up
    to ``jobs`` threads at once: a build is a C compiler run (~0.3 s), which the threads wait
    on with the GIL released. ``guard(key)``, if given, is held around each build (a lock
    shared by the processes that start together: one builds, the others then find the file).
    Returns how many this process built. Best effort: what fails here fails again, and is
    reported, in the kernel's own load."""
    from triton.backends.nvidia import driver as nv_driver

    seen, missing = set(), []
    for kernel in kernels:
        try:
            source = _launcher_source(kernel)
        except Exception:
            continue
        if source not in seen:
            seen.add(source)
            if not launcher_in_file_cache(source):
                missing.append(source)

    def build(source) -> bool:
        try:
            with guard(_launcher_key(source)) if guard else contextlib.nullcontext():
                if launcher_in_file_cache(source):  # another process built it meanwhile
                    return False
                # with the arguments CudaLauncher passes: its lookup then hits what this made
                nv_driver.compile_module_from_src(
                    src=source,
                    name="__triton_launcher",
                    library_dirs=nv_driver.library_dirs(),
                    include_dirs=nv_driver.include_dirs,
                    libraries=nv_driver.libraries,
                )
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
