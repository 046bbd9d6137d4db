"""The server-startup hook: one call that leaves every planned QSA kernel ready in Triton's
in-memory caches, compiling only what is truly missing, and an optional strict no-JIT mode.

``warmup()`` runs these stages, each a function of its own:

1. ``open_layers``: the cache folder, an overlay where it is read-only, the toolchain memo;
2. ``resolve_target``: the local GPU's target, or the named one to build for offline;
   then ``bind``: the store bound (:class:`BoundCache`: the folder layers, and the shared
   tier behind them if one is named), and the plan read from its memo (a QSA config's or a
   recording's; a family deployment is planned afresh);
3. ``verify``: every spec looked up in the folder layers; an entry whose checksums fail is
   never loaded;
4. ``fetch_remote``: the store's last layer, the shared tier, asked for the rest
   (``BoundCache.fill_from_tier``: fetched, verified, kept locally);
5. ``rebuild``: what is still missing, damaged or stale, compiled over a process pool (once
   across the processes, and through the tier's locks the hosts, starting together);
6. ``load``: every spec into Triton's in-memory cache, from the verified bytes;
7. ``give_autotune_winners``: a recording's measured ``triton.autotune`` winners handed to
   their autotuners (no benchmark for those keys);
8. ``prepare_gpu``: C launchers built at once, binaries put on the GPU;
9. ``register_strict``: the plan joins the process's strict-mode union.

Fault handling: a read-only cache is read, and anything missing compiles into the user's
overlay (or a memory-backed folder) with a warning; a write that fails (ENOSPC) keeps the
kernel in memory; a toolchain change is reported part by part and rebuilt; a held lock times
out with a warning naming the file; a shared tier that is down, slow or serves wrong bytes is
warned about and compiled around. Loss of the cache or the tier never stops a server.
``warmup()`` may be called any number of times in one process, for any mix of configs,
folders and devices.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from . import knobs
from . import strict as strict_mode
from . import triton_compat as tc
from ._fs import held_lock, read_json
from .cache import BoundCache, CacheFolder, Lookup, overlay_folder
from .collect import in_use, mark_used
from .errors import CacheError, ConfigError, WarmupUnavailable
from .planner import Plan, settle_for
from .qsa.config import DeploymentConfig, load_config
from .strict import set_strict_mode

__all__ = [
    "warmup",
    "WarmupReport",
    "set_strict_mode",
    "open_layers",
    "install_triton_cache",
    "resolve_target",
    "bind",
    "verify",
    "fetch_remote",
    "rebuild",
    "load",
    "give_autotune_winners",
    "prepare_gpu",
    "register_strict",
]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_warmed: dict[tuple, "WarmupReport"] = {}


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
    fetched: int = 0  # specs fetched from the shared tier (then loaded)
    remote: dict | None = None  # the shared tier's url and counters (hits, misses, bytes)
    autotune_winners: int = 0  # recorded winners given to their autotuners (no benchmarking)

    def summary(self) -> str:
        where = "" if self.device is None else f" (cuda:{self.device})"
        return (
            f"qsa-warmup: {self.planned} specs ready on {self.target}{where}: "
            f"{self.loaded} loaded, "
            f"{self.compiled} compiled"
            + (f", {self.fetched} fetched from the shared tier" if self.remote else "")
            + f" in {self.seconds * 1e3:.0f} ms from {self.cache_dir}; "
            f"strict={self.strict}" + (f"; {len(self.warnings)} warnings" if self.warnings else "")
        )


class _Warnings(list):
    """Warnings of one warmup: logged as they come, and kept for the report (``extend``: kept
    only, for those logged where they arose)."""

    def __call__(self, message: str) -> None:
        self.append(message)
        log.warning(message)


def _as_config(config):
    """A plan source: a DeploymentConfig, a family deployment, a recording, a dict (a QSA config,
    or ``{"family": ..., "config": ...}``), a JSON path or a preset name."""
    from .families import FamilyDeployment
    from .recording import Recording, plan_source_from_dict

    if config is None:
        return load_config()
    if isinstance(config, (DeploymentConfig, FamilyDeployment, Recording)):
        return config
    if isinstance(config, dict):
        return plan_source_from_dict(config)
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        data = read_json(text) if os.path.isfile(text) else None
        if isinstance(data, dict) and ("family" in data or "recording" in data):
            return plan_source_from_dict(data, source=text)
        return (
            load_config(text)
            if os.path.exists(text) or text.endswith(".json")
            else load_config(preset=text)
        )
    raise ConfigError(
        "config",
        f"expected a DeploymentConfig, dict, JSON path or preset name, got {type(config).__name__}",
    )


def _cuda_initialized() -> bool:
    try:
        import torch

        return torch.cuda.is_initialized()
    except Exception:
        return False


# -- stages -----------------------------------------------------------------------------------


def open_layers(root: CacheFolder, warn) -> tuple[CacheFolder, CacheFolder | None]:
    """(primary, overlay): the overlay only where the primary cannot be written. Installs the
    toolchain memo (before Triton's driver starts: its start asks for two memoized values)."""
    try:
        root.ensure_dirs()
    except CacheError:
        pass  # read-only, or not a folder: served from the overlay
    overlay = None
    if not root.writable():  # served as it is; said only if something must compile (rebuild)
        overlay = overlay_folder(root)
        log.info(
            "cache %s is read-only here; overlay: %s",
            root.root,
            overlay.root if overlay else "none",
        )
    tc.install_memoized_toolchain_identity((overlay or root).memo_dir)
    return root, overlay


def resolve_target(cfg: DeploymentConfig, target: str | None, device: int | None):
    """(local GPU target or None, target name, device index or None): the local GPU's unless
    ``target`` names one to build for offline. Refuses a target this Triton cannot compile for
    or that cannot run one of the config's dtypes."""
    gpu = tc.current_gpu_target() if target is None else None
    if gpu is None:
        name = target or cfg.target
        cfg.check_target(name)
        return None, name, None
    import torch

    device = torch.cuda.current_device() if device is None else _checked_device(device)
    with tc.device_context(device):
        gpu = tc.current_gpu_target()  # this device's: a host may mix GPU generations
    name = tc.target_name(gpu)
    cfg.check_target(name, "GPU target")
    return gpu, name, device


def _checked_device(device) -> int:
    """A device index this process can use, or a ConfigError naming what it sees."""
    import torch

    count = torch.cuda.device_count()
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
        visible = knobs.visible_devices()
        seen = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise ConfigError(
            "device",
            f"{device!r} is not a CUDA device index of this process: it sees {count}{seen}; "
            f"give 0..{count - 1}, counted within the visible devices",
        )
    return device


def bind(cfg, target, primary, overlay, remote_url: str | None, warn) -> BoundCache:
    """The bound cache, with the shared tier when ``remote_url`` names a usable one (a malformed
    URL or a missing client is warned about: the tier is an accelerator, never a need)."""
    from .remote import RemoteSettings

    try:
        if remote_url:
            RemoteSettings.parse(remote_url, field=knobs.REMOTE_ENV)
        cache = BoundCache(
            cfg,
            target,
            primary,
            overlay=overlay,
            remote_url=remote_url,
            remote_readonly=knobs.remote_readonly(),
            remote_budgeted=True,
        )
    except ConfigError as exc:
        warn(f"shared tier not used: {exc}")
        return BoundCache(cfg, target, primary, overlay=overlay)
    return cache  # the tier is first asked (and its key checked) only if something is missing


def fetch_remote(cache: BoundCache, todo: list, found: dict, warn) -> list:
    """Fetch what the shared tier holds of ``todo`` ((spec, lookup) pairs) into the cache,
    verified; the pairs still to build."""
    if not todo or cache.write_folder is None:  # nothing asked: nothing to say of the tier
        return todo
    fetched = cache.fill_from_tier([spec for spec, _ in todo])
    warn.extend(cache.tier_problems())
    left = []
    for spec, result in todo:
        again = cache.lookup(spec) if spec.id in fetched else result
        if again.ok:
            found[spec.id] = again
        else:
            left.append((spec, result))
    if fetched:
        cache.write_manifest([s for s in found])
    return left


def install_triton_cache(cache: BoundCache, warn) -> None:
    """Triton's file cache for this process: reads from the cache's layers (failed folders
    blocked), writes to the first that takes them, else to a memory-backed folder."""
    memory_dir: list[str] = []
    failed: set[str] = set()

    def memory() -> str:
        if not memory_dir:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else None
            memory_dir.append(tempfile.mkdtemp(prefix="qsa-warmup-mem-", dir=base))
        return memory_dir[0]

    def on_write_failure(folder: str, exc: OSError) -> None:
        if folder not in failed:
            failed.add(folder)
            warn(
                f"cannot write {folder} ({exc.strerror or exc}); "
                "keeping the kernel elsewhere and serving on"
            )

    overlay = cache.overlay.triton_dir if cache.overlay else None
    manager = tc.make_layered_manager(
        cache.primary.triton_dir, overlay, memory, cache.blocked, on_write_failure
    )
    tc.install_cache_manager(manager, cache.primary.triton_dir)
    tc.store_binaries_only(True)


def _describe(result: Lookup) -> str:
    return f"stale: {result.reason}" if result.state == "stale" else result.reason


def verify(cache: BoundCache, plan: Plan, warn) -> tuple[dict[str, Lookup], list]:
    """Each spec's lookup, and the (spec, lookup) pairs to rebuild. Serial: with threads
    (reads and checksums release the GIL) the Python between them contends for the GIL, and a
    2-core box went from 13 to 20-24 ms."""
    found, todo = {}, []
    for spec in plan.specs:
        result = found[spec.id] = cache.lookup(spec)
        if not result.ok:
            todo.append((spec, result))
            if (
                result.reason != "not built"
            ):  # a cold cache is expected, damage and staleness are not
                warn(f"{spec.id}: {_describe(result)}; rebuilding")
    return found, todo


def _prebuild_in_child(cache: BoundCache, only: set[str], jobs, timeout) -> dict:
    """``qsa-warmup prebuild --only ...`` in a fresh process; its JSON report. A pool forked
    from a CUDA process is unsafe, and spawn re-runs the server's ``__main__``."""
    from .families import FamilyDeployment
    from .recording import Recording, append_requests

    source = cache.config
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        if isinstance(source, FamilyDeployment):
            json.dump(source.to_dict()["config"], f)
        elif not isinstance(source, Recording):
            json.dump(source.to_dict(), f)
    if isinstance(source, Recording):
        append_requests(f.name, source.requests, source.winners)
        flags = ["--recording", f.name] + (["--retarget"] if source.retarget else [])
    elif isinstance(source, FamilyDeployment):  # found again by its class in the child
        kind = type(source.family)
        flags = ["--family", f"{kind.__module__}:{kind.__qualname__}", "--config", f.name]
    else:
        flags = ["--config", f.name]
    try:
        cmd = [
            sys.executable,
            "-m",
            "qsa_warmup",
            "prebuild",
            *flags,
            "--target",
            cache.target,
            "--cache-dir",
            cache.write_folder.root,
            "--json",
            "--only",
            ",".join(sorted(only)),
        ]
        if jobs:
            cmd += ["--jobs", str(jobs)]
        if timeout is not None:
            cmd += ["--lock-timeout", str(timeout)]
        tier_url = cache.tier_url_for_builds()
        if tier_url:
            cmd += ["--remote", tier_url]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not proc.stdout.strip():
            raise OSError(f"prebuild child exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        return json.loads(proc.stdout)
    finally:
        os.unlink(f.name)


def rebuild(
    cache: BoundCache, plan: Plan, todo: list, found: dict, *, jobs=None, timeout=None, warn
) -> int:
    """Compile the specs of ``todo`` ((spec, lookup) pairs) into the cache's write folder over a
    process pool (compile-once across processes), then look each up again; returns how many
    the pool compiled. What still has no verified entry is compiled in-process by :func:`load`."""
    if todo and cache.write_folder is not cache.primary:
        where = cache.write_folder.root if cache.write_folder else "memory"
        warn(
            f"cache {cache.primary.root} is read-only here; {len(todo)} specs compile into {where}"
        )
    if not todo or cache.write_folder is None:
        return 0
    from .engine import prebuild

    only = {spec.id for spec, _ in todo}
    compiled = 0
    try:
        child = _cuda_initialized()
        if child:
            report = _prebuild_in_child(cache, only, jobs, timeout)
        else:
            report = prebuild(
                cache,
                plan=plan,
                jobs=jobs,
                lock_timeout=timeout,
                only=only,
                fetch_first=False,
                count=False,
            )
            report = {**report.__dict__, "results": [r.__dict__ for r in report.results]}
        compiled, failed = report["compiled"], report["failed"]
        if child:  # an in-process build counted into the bound cache's own
            theirs = report.get("remote") or {}
            cache.add_tier_counts(theirs, theirs.get("problems", []))
        if failed:
            warn(f"{failed} specs failed to build in the pool; compiling them in-process")
    except OSError as exc:
        warn(f"prebuild into {cache.write_folder.root} failed ({exc}); compiling in-process")
    for spec, _ in todo:
        result = cache.lookup(spec)
        if result.ok:
            found[spec.id] = result
    return compiled


def load(plan: Plan, found: dict, offline_target, device, warn) -> tuple[list, int, int]:
    """(ready [(spec, kernel)], loaded, compiled): a verified entry goes straight into the JIT
    function's in-memory cache (its compile hash must equal the plan's); anything else takes
    Triton's compile(), forced to build afresh, never taken unverified from Triton's files."""
    ready, loaded, compiled = [], 0, []
    with (
        tc.compilation_listener(lambda name, hit: hit or compiled.append(name)),
        tc.device_context(device),
        tc.active_driver(offline_target),
    ):
        for spec in plan.specs:
            kernel = None
            result = found[spec.id]
            if result.ok:
                kernel = tc.load_from_entry(
                    spec.launch,
                    result.entry_dir,
                    result.entry["files"],
                    result.entry.get("hash", ""),
                    planned_hash=spec.compile_hash or None,
                    specialization=spec.specialization or None,
                    contents=result.contents,
                )
                if kernel is None:
                    warn(f"{spec.id}: Triton's compile hash no longer matches the entry; compiling")
                else:
                    loaded += 1
            if kernel is None:
                settle_for(plan.config)  # what this writes is what the next start's plan expects
                with tc.forced_compile():
                    kernel = spec.launch.warmup()
            ready.append((spec, kernel))
    return ready, loaded, len(compiled)


def give_autotune_winners(source, target: str, warn) -> int:
    """A recording's measured autotune winners for ``target``, given to their autotuners."""
    from .recording import Recording

    if not isinstance(source, Recording):
        return 0
    given, problems = source.give_autotune_winners(target)
    for problem in problems:
        warn(problem)
    return given


def prepare_gpu(
    ready: list, lock_folder: CacheFolder, device: int, *, jobs=None, timeout=None, warn
) -> None:
    """Build the distinct C launchers the cache lacks at once (a cold cache, or one prebuilt
    without a GPU: a compiler run each), each once across the processes starting together,
    then put every binary on the GPU."""
    lock_wait = knobs.lock_timeout() if timeout is None else timeout

    def launcher_lock(key: str):
        return held_lock(lock_folder.lock_path(f"launcher-{key[:16]}"), lock_wait, warn)

    with tc.device_context(device):
        tc.share_launcher_modules()
        tc.prepare_launchers([kernel for _, kernel in ready], jobs or knobs.jobs(), launcher_lock)
        for spec, kernel in ready:
            try:
                tc.init_handles(kernel)
            except Exception as exc:  # e.g. out of shared memory: the launch fails the same way
                warn(f"{spec.id}: cannot load on cuda:{device}: {exc}")


def register_strict(plan: Plan, mode: str, scope: str | None = None) -> None:
    strict_mode.register_plan(plan)
    set_strict_mode(mode, scope)


# -- the hook ---------------------------------------------------------------------------------


def _repeat(
    cfg, target, device, root: CacheFolder, strict: str, scope: str, start: float
) -> WarmupReport | None:
    """The report of an earlier warmup of the same config, target, device and folder in this
    process, as a repeat (nothing to do but set strict mode), else None."""
    _, target, device = resolve_target(cfg, target, device)
    with _lock:
        previous = _warmed.get((cfg.geometry_hash(), target, device, root.root))
    if previous is None:
        return None
    set_strict_mode(strict, scope)
    report = WarmupReport(
        **{
            **previous.__dict__,
            "seconds": time.perf_counter() - start,
            "repeat": True,
            "loaded": 0,
            "compiled": 0,
            "strict": strict,
        }
    )
    log.info(report.summary())
    return report


def warmup(
    config=None,
    *,
    recordings=None,
    device: int | None = None,
    cache_dir: str | None = None,
    jobs: int | None = None,
    strict: str | None = None,
    strict_scope: str | None = None,
    timeout: float | None = None,
    target: str | None = None,
    remote: str | None = None,
) -> WarmupReport:
    """Make every planned spec of ``config`` ready in this process; compile only what is missing.

    ``config``: a DeploymentConfig, dict, JSON path or preset name (default preset if None and
    no recordings are given). ``recordings``: recording files (a list, a comma-separated
    string, or a loaded Recording; default: $QSA_WARMUP_RECORDINGS) warmed besides ``config``.
    ``device``: CUDA device index (default: current); with no GPU, or with ``target`` given,
    kernels are built and loaded for that target offline (CI, tests). ``strict``: off | warn |
    error after warmup (default: $QSA_WARMUP_STRICT); ``strict_scope``: planned (kernels of a
    warmed plan or recording, and the ``kernels`` package) | all (any Triton compile; default:
    $QSA_WARMUP_STRICT_SCOPE). ``timeout``: seconds to wait for another process's compile of a
    spec before compiling it here. ``remote``: the shared tier's URL (default:
    $QSA_WARMUP_REMOTE; "" for none). Safe to call again (a repeat is nearly free), for other
    configs, folders and devices, and from several processes at once. With recordings, the
    report sums every source's.
    """
    start = time.perf_counter()
    if knobs.interpreter_requested():
        raise WarmupUnavailable(
            "TRITON_INTERPRET=1: kernels run in the interpreter, there is nothing to warm up"
        )
    if knobs.record_path():  # this process's later compile requests go into a recording
        from .recording import start_recording_from_knobs

        start_recording_from_knobs()
    sources = _sources(config, recordings)
    strict = strict or knobs.strict_mode()
    if strict not in knobs.STRICT_MODES:
        raise ConfigError(
            "strict", f"must be one of {', '.join(knobs.STRICT_MODES)}, got {strict!r}"
        )
    scope = strict_scope or knobs.strict_scope()
    if scope not in knobs.STRICT_SCOPES:
        raise ConfigError(
            "strict_scope", f"must be one of {', '.join(knobs.STRICT_SCOPES)}, got {scope!r}"
        )
    root = CacheFolder(cache_dir or knobs.cache_dir())
    options = dict(device=device, jobs=jobs, timeout=timeout, target=target, remote=remote)
    reports = [_warm_source(cfg, root, strict, scope, start, **options) for cfg in sources]
    if len(reports) == 1:
        return reports[0]
    return _summed(reports, time.perf_counter() - start)


def _sources(config, recordings) -> list:
    """The plan sources one warmup call makes ready: the config (unless only recordings are
    given), then the recordings merged into one."""
    from .recording import Recording, load_recordings

    if recordings is None:
        recordings = knobs.recordings() or None
    sources = [] if config is None and recordings else [_as_config(config)]
    if recordings:
        sources.append(
            recordings if isinstance(recordings, Recording) else load_recordings(recordings)
        )
    return sources


def _summed(reports: list[WarmupReport], seconds: float) -> WarmupReport:
    first = reports[0]
    return WarmupReport(
        **{
            **first.__dict__,
            "planned": sum(r.planned for r in reports),
            "loaded": sum(r.loaded for r in reports),
            "compiled": sum(r.compiled for r in reports),
            "fetched": sum(r.fetched for r in reports),
            "autotune_winners": sum(r.autotune_winners for r in reports),
            "seconds": seconds,
            "rebuilt": [x for r in reports for x in r.rebuilt],
            "warnings": [x for r in reports for x in r.warnings],
            "repeat": all(r.repeat for r in reports),
        }
    )


def _warm_source(
    cfg,
    root: CacheFolder,
    strict: str,
    scope: str,
    start: float,
    *,
    device,
    jobs,
    timeout,
    target,
    remote,
) -> WarmupReport:
    if _warmed:  # maybe a repeat: answer it before touching any folder
        repeat = _repeat(cfg, target, device, root, strict, scope, start)
        if repeat is not None:
            return repeat
    warn = _Warnings()
    with strict_mode.warming():
        primary, overlay = open_layers(root, warn)
        gpu, target, device = resolve_target(cfg, target, device)
        remote_url = knobs.remote_url() if remote is None else remote
        with in_use(primary):  # gc removes nothing while this start reads the cache
            cache = bind(cfg, target, primary, overlay, remote_url, warn)
            install_triton_cache(cache, warn)
            plan = cache.plan(offline=gpu is None)
            found, todo = verify(cache, plan, warn)
            todo = fetch_remote(cache, todo, found, warn)
            by_pool = rebuild(cache, plan, todo, found, jobs=jobs, timeout=timeout, warn=warn)
            offline_target = None if gpu is not None else tc.parse_target(target)
            ready, loaded, compiled = load(plan, found, offline_target, device, warn)
            winners = give_autotune_winners(cfg, target, warn)
            if gpu is not None:
                prepare_gpu(
                    ready,
                    cache.write_folder or primary,
                    device,
                    jobs=jobs,
                    timeout=timeout,
                    warn=warn,
                )
    register_strict(plan, strict, scope)
    report = WarmupReport(
        planned=len(plan.specs),
        loaded=loaded,
        compiled=compiled + by_pool,
        seconds=time.perf_counter() - start,
        cache_dir=primary.root,
        target=target,
        device=device,
        fingerprint=cache.fingerprint.parts,
        strict=strict,
        rebuilt=[(spec.id, _describe(result)) for spec, result in todo],
        warnings=list(warn),
        fetched=cache.tier_counters().get("hits", 0),
        remote=cache.tier_report(),
        autotune_winners=winners,
    )
    with _lock:
        _warmed[(cfg.geometry_hash(), target, device, primary.root)] = report
    _count(cache, report)
    _say(report.summary())
    return report


def _count(cache: BoundCache, report: WarmupReport) -> None:
    from .stats import add_counts

    damaged = sum(reason != "not built" for _, reason in report.rebuilt)
    mark_used(cache.manifest_dir(cache.primary))  # for gc's least-recently-used order
    add_counts(
        cache.write_folder or cache.primary,
        starts=1,
        loads=report.loaded,
        compiles=report.compiled,
        fetched=report.fetched,
        rebuilt_after_damage=damaged,
    )


def _say(summary: str) -> None:
    """The summary through logging (INFO); where nothing is configured to show it (no handler
    on the way to the root logger), one line on stderr rather than nothing."""
    if log.hasHandlers():
        log.info(summary)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, summary, None, None))
