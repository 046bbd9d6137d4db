"""Every Triton internal qsa_warmup relies on, and nothing else (written against Triton 3.6).

A Triton upgrade should touch this package only. Split by concern:

- ``targets``: target names, what this Triton compiles for and each target's limits, and an
  offline driver, so ``JITFunction.warmup`` runs Triton's own binder and compiler for a named
  GPU target on a machine with no GPU (keys then equal the GPU server's);
- ``hooks``: the compile requests a launch makes, the compilation listener, forced compiles;
- ``cache_managers``: Triton's file-cache layout and managers that resolve group files inside
  whatever folder the cache lives in now, with a layered one for serving;
- ``loader``: a launch bound as Triton's runtime binds it (in-memory key, compile hash,
  binding data), and a verified entry put straight into the in-memory cache;
- ``toolchain``: the toolchain parts of every key, and a memo of what Triton recomputes in
  every fresh process;
- ``launchers``: Triton's C launchers, shared and built at once;
- ``recorded``: any kernel's compile requests as a recording keeps them, and building or binding
  them again from Triton's serialization of the request;
- ``autotune``: the configs ``triton.autotune`` chose while a run was recorded, given back to a
  server's autotuners.

Every Triton function or attribute replaced here is recorded; :func:`restore` puts Triton's
own back.
"""

from __future__ import annotations

from ._patches import restore
from .autotune import (
    AutotuneWinner,
    apply_autotune_winner,
    find_autotuner,
    recording_autotune_winners,
    tuned_jit_function,
    winner_of,
)
from .cache_managers import (
    RelocatingCacheManager,
    file_cache_dirname,
    group_file_paths,
    install_cache_manager,
    make_layered_manager,
    repoint_group_file,
    repointed_group,
    set_triton_cache,
    store_binaries_only,
    triton_cache_dir,
    use_triton_cache_dir,
)
from .hooks import (
    RequestedVariant,
    capture_requests,
    compilation_listener,
    forced_compile,
    install_jit_cache_hook,
)
from .launchers import init_handles, prepare_launchers, share_launcher_modules
from .loader import (
    CompiledInfo,
    LaunchBinding,
    bind_launch,
    binding_knobs,
    compile_hash_of,
    compiled_info,
    compiled_kernel_from_files,
    forget_compiled,
    is_jit_function,
    load_from_entry,
    settle_kernel_hashes,
    specialization_data,
)
from .recorded import (
    KernelNotFound,
    RecordedRequest,
    localized_specialization,
    preload_recorded,
    recorded_compile_hash,
    recorded_options,
    recording_requests,
    resolve_jit_function,
    retarget_specialization,
    source_hash,
)
from .targets import (
    GPUTarget,
    OfflineDriver,
    active_driver,
    compilable_archs,
    current_gpu_target,
    device_context,
    parse_target,
    set_active_target,
    target_limits,
    target_name,
)
from .toolchain import (
    install_memoized_toolchain_identity,
    prime_toolchain_memo,
    stale_memo_files,
    toolchain_parts,
)

__all__ = [
    "restore",
    # autotune
    "AutotuneWinner",
    "apply_autotune_winner",
    "find_autotuner",
    "recording_autotune_winners",
    "tuned_jit_function",
    "winner_of",
    # targets
    "GPUTarget",
    "OfflineDriver",
    "active_driver",
    "compilable_archs",
    "current_gpu_target",
    "device_context",
    "parse_target",
    "set_active_target",
    "target_limits",
    "target_name",
    # hooks
    "RequestedVariant",
    "capture_requests",
    "compilation_listener",
    "forced_compile",
    "install_jit_cache_hook",
    # cache managers
    "RelocatingCacheManager",
    "file_cache_dirname",
    "group_file_paths",
    "install_cache_manager",
    "make_layered_manager",
    "repoint_group_file",
    "repointed_group",
    "set_triton_cache",
    "store_binaries_only",
    "triton_cache_dir",
    "use_triton_cache_dir",
    # loader
    "CompiledInfo",
    "LaunchBinding",
    "bind_launch",
    "binding_knobs",
    "compile_hash_of",
    "compiled_info",
    "compiled_kernel_from_files",
    "forget_compiled",
    "is_jit_function",
    "load_from_entry",
    "settle_kernel_hashes",
    "specialization_data",
    # recorded requests
    "KernelNotFound",
    "RecordedRequest",
    "localized_specialization",
    "preload_recorded",
    "recorded_compile_hash",
    "recorded_options",
    "recording_requests",
    "resolve_jit_function",
    "retarget_specialization",
    "source_hash",
    # toolchain
    "install_memoized_toolchain_identity",
    "prime_toolchain_memo",
    "stale_memo_files",
    "toolchain_parts",
    # C launchers
    "init_handles",
    "prepare_launchers",
    "share_launcher_modules",
]
