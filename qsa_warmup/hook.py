"""The server-startup hook: one call that leaves every planned QSA kernel ready in Triton's
in-memory caches, compiling only what is truly missing, and an optional strict no-JIT mode.

Fault handling: an entry whose checksums fail is never loaded (Triton sees a miss and
rebuilds it); a read-only cache is read, and anything missing compiles into a writable
overlay (or a memory-backed folder) with a warning; a write that fails (ENOSPC) keeps the
kernel in memory; a toolchain change is reported part by part and rebuilt; a held lock
times out with a warning naming the file. Loss of the cache never stops a server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field

import filelock

from . import knobs
from . import triton_compat as tc
from .cache import KernelCache, current_fingerprint
from .config import DeploymentConfig, load_config
from .errors import ConfigError, StrictModeError, WarmupUnavailable

__all__ = ["warmup", "WarmupReport", "set_strict_mode"]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_warmed: dict[tuple, "WarmupReport"] = {}
_planned_variants: dict[str, list] = {}  # kernel name -> planned RequestedVariant-like (constants, warps)
_strict = {"mode": "off", "installed": False}


@dataclass
class WarmupReport:
    planned: int
    loaded: int
    compiled: int
    seconds: float
    cache_dir: str
    target: str
    device: int | None
    fingerprint: dict
    strict: str
    rebuilt: list = field(default_factory=list)  # (spec id, reason) rebuilt instead of loaded
    warnings: list = field(default_factory=list)
    repeat: bool = False

    def summary(self) -> str:
        return (f"qsa-warmup: {self.planned} specs ready on {self.target}"
                f"{'' if self.device is None else f' (cuda:{self.device})'}: {self.loaded} loaded, "
                f"{self.compiled} compiled in {self.seconds * 1e3:.0f} ms from {self.cache_dir}; strict={self.strict}"
                + (f"; {len(self.warnings)} warnings" if self.warnings else ""))


def _as_config(config) -> DeploymentConfig:
    if config is None:
        return load_config()
    if isinstance(config, DeploymentConfig):
        return config
    if isinstance(config, dict):
        return DeploymentConfig.from_dict(config)
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        return load_config(text) if os.path.exists(text) or text.endswith(".json") else load_config(preset=text)
    raise ConfigError("config", f"expected a DeploymentConfig, dict, JSON path or preset name, got {type(config).__name__}")


def _closest(requested) -> str | None:
    planned = _planned_variants.get(requested.kernel)
    if not planned:
        return None
    want = json.loads(requested.constants)

    def distance(spec_id_and_consts):
        _, consts, warps = spec_id_and_consts
        return sum(want.get(k) != v for k, v in consts.items()) + (warps != requested.num_warps)
    spec_id, consts, warps = min(planned, key=distance)
    return spec_id


def _strict_hook(variant, module: str) -> bool:
    mode = _strict["mode"]
    if mode == "off" or not module.startswith("kernels."):
        return False
    text = f"{variant.kernel} num_warps={variant.num_warps} constants={variant.constants}"
    closest = _closest(variant)
    if mode == "error":
        raise StrictModeError(text, closest)
    log.warning("JIT compile after warmup: %s; closest planned: %s", text, closest)
    return False


def set_strict_mode(mode: str) -> None:
    """off | warn | error: what a compile of a ``kernels`` kernel does after warmup."""
    if mode not in knobs.STRICT_MODES:
        raise ConfigError("strict", f"must be one of {', '.join(knobs.STRICT_MODES)}, got {mode!r}")
    with _lock:
        _strict["mode"] = mode
        if not _strict["installed"]:
            tc.install_jit_cache_hook(_strict_hook)
            _strict["installed"] = True


def _cuda_initialized() -> bool:
    try:
        import torch

        return torch.cuda.is_initialized()
    except Exception:
        return False


@contextlib.contextmanager
def _held_lock(path: str, timeout: float, warn):
    """Hold the file lock at ``path``; past ``timeout`` seconds, or where no lock file can be
    made, go on without it (compile-once saves work, it is not needed for correctness)."""
    lock = filelock.FileLock(path, timeout=timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        warn(f"lock {path} held for over {timeout:.0f} s; going on without it")
        lock = None
    except OSError:
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def _resolve_target(cfg, target, device):
    """(local GPU target or None, target name, device index or None): the local GPU's unless
    ``target`` names one to build for offline."""
    gpu = tc.current_gpu_target() if target is None else None
    if gpu is None:
        return None, target or cfg.target, None
    import torch

    device = torch.cuda.current_device() if device is None else device
    with tc.device_context(device):
        return gpu, tc.target_name(tc.current_gpu_target()), device


def _prebuild_in_child(cfg, target, cache, jobs, timeout, only) -> tuple[int, int]:
    """``qsa-warmup prebuild --only ...`` in a fresh process; (compiled, failed)."""
    import subprocess
    import sys

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg.to_dict(), f)
    try:
        cmd = [sys.executable, "-m", "qsa_warmup", "prebuild", "--config", f.name, "--target", target, "--cache-dir",
               cache.root, "--json", "--only", ",".join(sorted(only))]
        if jobs:
            cmd += ["--jobs", str(jobs)]
        if timeout is not None:
            cmd += ["--lock-timeout", str(timeout)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            raise OSError(f"prebuild child exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        report = json.loads(proc.stdout)
        return report["compiled"], report["failed"]
    finally:
        os.unlink(f.name)


def _writable_overlay(cache: KernelCache) -> KernelCache | None:
    import platformdirs

    name = hashlib.sha256(cache.root.encode()).hexdigest()[:16]
    for base in (platformdirs.user_cache_dir("qsa-warmup-overlay"), tempfile.gettempdir()):
        overlay = KernelCache(os.path.join(base, name))
        try:
            overlay.ensure_dirs()
            if overlay.writable():
                return overlay
        except OSError:
            continue
    return None


def warmup(config=None, *, device: int | None = None, cache_dir: str | None = None, jobs: int | None = None,
           strict: str | None = None, timeout: float | None = None, target: str | None = None) -> WarmupReport:
    """Make every planned spec of ``config`` ready in this process; compile only what is missing.

    ``config``: a DeploymentConfig, dict, JSON path or preset name (default preset if None).
    ``device``: CUDA device index (default: current); with no GPU, or with ``target`` given,
    kernels are built and loaded for that target offline (CI, tests). ``strict``: off | warn |
    error after warmup (default: $QSA_WARMUP_STRICT). ``timeout``: seconds to wait for another
    process's compile of a spec before compiling it here. Safe to call again (nearly free) and
    from several processes at once.
    """
    start = time.perf_counter()
    if knobs.interpreter_requested():
        raise WarmupUnavailable("TRITON_INTERPRET=1: kernels run in the interpreter, there is nothing to warm up")
    cfg = _as_config(config)
    strict = strict or knobs.strict_mode()
    if strict not in knobs.STRICT_MODES:
        raise ConfigError("strict", f"must be one of {', '.join(knobs.STRICT_MODES)}, got {strict!r}")
    cache = KernelCache(cache_dir or knobs.cache_dir())
    resolved = None  # (gpu, target, device)
    if _warmed:  # maybe a repeat call: answer it before touching any folder
        resolved = _resolve_target(cfg, target, device)
        with _lock:
            previous = _warmed.get((cfg.geometry_hash(), *resolved[1:], cache.root))
        if previous is not None:
            set_strict_mode(strict)
            report = WarmupReport(**{**previous.__dict__, "seconds": time.perf_counter() - start, "repeat": True,
                                     "loaded": 0, "compiled": 0, "strict": strict})
            log.info(report.summary())
            return report
    warnings: list[str] = []

    def warn(msg: str) -> None:
        warnings.append(msg)
        log.warning(msg)

    # -- cache folders: primary (maybe read-only), overlay for writes, memory as a last resort
    try:
        cache.ensure_dirs()
    except OSError:
        pass
    overlay = None
    if not cache.writable():
        overlay = _writable_overlay(cache)
        warn(f"cache {cache.root} is read-only; compiles go to "
             f"{overlay.root if overlay else 'memory'}")
    memory_dir: list[str] = []

    def memory() -> str:
        if not memory_dir:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else None
            memory_dir.append(tempfile.mkdtemp(prefix="qsa-warmup-mem-", dir=base))
        return memory_dir[0]

    # before Triton's driver starts: its start asks for two of the memoized values
    tc.install_memoized_toolchain_identity(os.path.join((overlay or cache).root, "toolchain-memo"))
    gpu, target, device = resolved or _resolve_target(cfg, target, device)
    memo_key = (cfg.geometry_hash(), target, device, cache.root)

    write_failures: set[str] = set()

    def on_write_failure(folder: str, exc: OSError) -> None:
        if folder not in write_failures:
            write_failures.add(folder)
            warn(f"cannot write {folder} ({exc.strerror or exc}); keeping the kernel elsewhere and serving on")

    blocked: set[str] = set()
    manager = tc.make_layered_manager(cache.triton_dir, overlay.triton_dir if overlay else None, memory, blocked,
                                      on_write_failure)
    tc.install_cache_manager(manager, cache.triton_dir)
    tc.store_binaries_only(True)

    fp = current_fingerprint(target)
    readable = [c for c in (cache, overlay) if c is not None]
    from .planner import memoized_plan

    plan = memoized_plan(cfg, target, fp.digest, readable, offline=gpu is None)
    # -- verify what is there; anything not intact is never loaded
    stale = cache.stale_reason(cfg, target, fp)
    rebuild = []
    verified: dict[str, tuple[str, dict]] = {}  # spec id -> (entry folder, entry) that passed checksums
    contents: dict[str, bytes] = {}  # the bytes those checksums were taken of, which are what is loaded
    # serial: with threads (reads and checksums release the GIL) the Python between them
    # contends for the GIL, and the 2-core CI box went from 13 to 20-24 ms
    for spec in plan.specs:
        states = []
        for c in readable:
            entry = c.read_entry(cfg, target, fp, spec.id)
            status = c.verify_entry(entry, spec, contents)
            states.append(status)
            if status.state == "ok":
                verified[spec.id] = (os.path.join(c.triton_dir, entry["folder"]), entry)
                break
            if status.state == "corrupt" and entry and "folder" in entry:
                blocked.add(entry["folder"])
        if states[-1].state != "ok":
            reason = next((s.reason for s in states if s.state == "corrupt"), states[0].reason)
            if states[0].state == "missing" and stale is not None:
                reason = f"stale: {stale}"
            rebuild.append((spec, reason))
    for spec, reason in rebuild:
        if reason != "not built":  # a cold cache is expected, damage and staleness are not
            warn(f"{spec.id}: {reason}; rebuilding")
    # -- compile what is missing: process pool, compile-once across processes (locks)
    compiled_by_pool = 0
    if rebuild:
        from .engine import prebuild

        write_cache = cache if cache.writable() else overlay
        if write_cache is not None:
            try:
                only = {spec.id for spec, _ in rebuild}
                if _cuda_initialized():
                    # a pool forked from a CUDA process is unsafe, and spawn re-runs the server's
                    # __main__: build in a child process of our own CLI instead
                    compiled_by_pool, failed = _prebuild_in_child(cfg, target, write_cache, jobs, timeout, only)
                else:
                    report = prebuild(cfg, target, write_cache, jobs=jobs, plan=plan, lock_timeout=timeout, only=only)
                    compiled_by_pool, failed = report.compiled, report.failed
                if failed:
                    warn(f"{failed} specs failed to build in the pool; compiling them in-process")
            except OSError as exc:
                warn(f"prebuild into {write_cache.root} failed ({exc}); compiling in-process")
    # specs with a verified entry now (the pool may have repaired or built them) load from the
    # cache; the rest are compiled here, never taken unverified from Triton's files
    unverified = set()
    for spec, _ in rebuild:
        for c in readable:
            entry = c.read_entry(cfg, target, fp, spec.id)
            if entry and "folder" in entry and c.verify_entry(entry, spec).state == "ok":
                if c is cache:
                    blocked.discard(entry["folder"])
                verified[spec.id] = (os.path.join(c.triton_dir, entry["folder"]), entry)
                break
        else:
            unverified.add(spec.id)
    # -- load every spec into Triton's in-memory cache (and onto the GPU)
    # A verified entry goes straight into the JIT function's in-memory cache (its Triton compile
    # hash must equal the plan's, which the plan computed, or memoized under the toolchain's
    # fingerprint and the kernels' source digest); anything else takes
    # Triton's compile(), forced to build afresh unless the entry was verified.
    hits, misses, ready = [], [], []
    offline_target = None if gpu is not None else tc.parse_target(target)
    with tc.compilation_listener(lambda name, hit: (hits if hit else misses).append(name)), \
            tc.device_context(device), tc.active_driver(offline_target):
        for spec in plan.specs:
            kernel = None
            if spec.id in verified and spec.id not in unverified:
                folder, entry = verified[spec.id]
                kernel = tc.load_from_entry(spec.launch, folder, entry["files"], entry.get("hash", ""),
                                             planned_hash=spec.compile_hash or None,
                                             specialization=spec.specialization or None, contents=contents)
                if kernel is None:
                    warn(f"{spec.id}: Triton's compile hash no longer matches the entry; compiling")
                    unverified.add(spec.id)
                else:
                    hits.append(spec.kernel)
            if kernel is None:
                from .planner import settle_kernel_hashes

                settle_kernel_hashes()  # so what this writes is what the next start's plan expects
                with tc.forced_compile(spec.id in unverified):
                    kernel = spec.launch.warmup()
            ready.append((spec, kernel))
        if gpu is not None:
            # Triton builds each kernel's C launcher where the cache has none (a cold cache, or
            # one prebuilt without a GPU), a compiler run each: build the distinct ones at once,
            # each once across the processes starting together (the pool's lock folder)
            lock_cache = overlay or cache
            lock_wait = knobs.lock_timeout() if timeout is None else timeout

            def launcher_lock(key: str):
                return _held_lock(lock_cache.lock_path(f"launcher-{key[:16]}"), lock_wait, warn)
            tc.share_launcher_modules()
            tc.prepare_launchers([kernel for _, kernel in ready], jobs or knobs.jobs(), launcher_lock)
            for spec, kernel in ready:
                try:
                    tc.init_handles(kernel)
                except Exception as exc:  # e.g. out of shared memory: the launch would fail the same way
                    warn(f"{spec.id}: cannot load on cuda:{device}: {exc}")
    _planned_variants.clear()
    for spec in plan.specs:
        consts = {k: v for k, v in spec.launch.options.items() if k not in ("num_warps", "num_stages")}
        _planned_variants.setdefault(spec.kernel, []).append(
            (spec.id, json.loads(json.dumps(consts, default=str)), spec.launch.options.get("num_warps", 4)))
    set_strict_mode(strict)
    report = WarmupReport(planned=len(plan.specs), loaded=len(hits), compiled=len(misses) + compiled_by_pool,
                          seconds=time.perf_counter() - start, cache_dir=cache.root, target=target, device=device,
                          fingerprint=fp.parts, strict=strict, rebuilt=[(s.id, r) for s, r in rebuild],
                          warnings=warnings)
    with _lock:
        _warmed[memo_key] = report
    log.info(report.summary())
    return report
