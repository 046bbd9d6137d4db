"""The compile engine: build a plan's specs into the cache without launching them.

Each spec is built by ``build_spec`` (FlashInfer's pattern): verify the entry; take the spec's
``FileLock``; verify again (another process may have built it meanwhile); only then compile.
Specs run in parallel over a process pool; concurrent processes building the same plan into
one cache compile each spec once between them. Compiles go through ``JITFunction.warmup``
under the target's driver, so the keys are the GPU server's.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import logging
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable

import filelock

from . import knobs
from . import triton_compat as tc
from .cache import EntryStatus, KernelCache, current_fingerprint
from .config import DeploymentConfig
from .planner import Plan, PlannedSpec, build_plan, memoized_plan, settle_kernel_hashes

__all__ = ["BuildReport", "prebuild", "build_spec", "check_plan", "SpecResult"]

log = logging.getLogger(__name__)


@dataclass
class SpecResult:
    spec_id: str
    outcome: str  # compiled | cached | failed
    seconds: float = 0.0
    error: str = ""


@dataclass
class BuildReport:
    planned: int
    compiled: int
    cached: int
    failed: int
    seconds: float
    cache_dir: str
    target: str
    fingerprint: dict
    unloadable: list = field(default_factory=list)
    results: list = field(default_factory=list)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["results"] = [r.__dict__ for r in self.results]
        d["unloadable"] = [u.__dict__ for u in self.unloadable]
        return d


def _purge_entry_files(cache: KernelCache, entry) -> None:
    # Group file first: Triton treats a folder without its group file as a miss.
    folder = os.path.join(cache.triton_dir, entry["folder"])
    for grp in tc.group_file_paths(folder) if os.path.isdir(folder) else []:
        os.unlink(grp)
    shutil.rmtree(folder, ignore_errors=True)


def build_spec(cache: KernelCache, cfg: DeploymentConfig, target: str, fp, spec: PlannedSpec,
               lock_timeout: float) -> SpecResult:
    """Make ``spec``'s entry valid in ``cache``; compile only if no process has built it."""
    start = time.perf_counter()

    def verified():
        entry = cache.read_entry(cfg, target, fp, spec.id)
        return entry, cache.verify_entry(entry, spec)

    entry, status = verified()
    if status.state == "ok":
        return SpecResult(spec.id, "cached", time.perf_counter() - start)
    lock = filelock.FileLock(cache.lock_path(spec.key_digest), timeout=lock_timeout)
    try:
        lock.acquire()
    except filelock.Timeout:
        log.warning("lock %s held for over %.0f s; compiling %s without it", lock.lock_file, lock_timeout, spec.id)
        lock = None
    try:
        entry, status = verified()
        if status.state == "ok":
            return SpecResult(spec.id, "cached", time.perf_counter() - start)
        if status.state == "corrupt" and entry and "folder" in entry:
            log.warning("%s: %s; rebuilding", spec.id, status.reason)
            _purge_entry_files(cache, entry)
        # No verified entry: Triton's own files for this kernel (if any) are unverified, so
        # compile afresh rather than take them; the entry then records what was just built.
        with tc.forced_compile():
            settle_kernel_hashes()  # the entry's hash must be the plan's, whatever compiled first here
            compiled = spec.launch.warmup()
        cache.record_entry(cfg, target, fp, spec, compiled)
        return SpecResult(spec.id, "compiled", time.perf_counter() - start)
    finally:
        if lock is not None:
            lock.release()


# -- worker processes -----------------------------------------------------------------------

# The parent's plan, inherited by forked workers so that they do not plan again.
_inherited: dict[tuple[str, str], Plan] = {}


@functools.lru_cache(maxsize=4)
def _worker_plan(cfg_json: str, target: str) -> tuple[Plan, dict]:
    plan = _inherited.get((cfg_json, target))
    if plan is None:
        plan = build_plan(DeploymentConfig.from_dict(json.loads(cfg_json)), target)
    return plan, plan.by_id()


def _worker_init(cache_root: str, target: str) -> None:
    logging.basicConfig(level=logging.WARNING)
    tc.set_triton_cache(os.path.join(cache_root, "triton"))
    tc.store_binaries_only(True)
    tc.install_memoized_toolchain_identity(os.path.join(cache_root, "toolchain-memo"))
    tc.set_active_target(tc.parse_target(target))


def _worker_build(cfg_json: str, target: str, cache_root: str, spec_id: str, lock_timeout: float) -> SpecResult:
    try:
        plan, by_id = _worker_plan(cfg_json, target)
        return build_spec(KernelCache(cache_root), plan.config, target, current_fingerprint(target), by_id[spec_id],
                          lock_timeout)
    except Exception as exc:  # reported per spec; the build goes on
        log.exception("building %s failed", spec_id)
        return SpecResult(spec_id, "failed", error=f"{type(exc).__name__}: {exc}")


def _expected_cost(spec: PlannedSpec) -> tuple:
    family_rank = {"topk": 3, "prefill": 2, "decode": 1, "expand": 0}.get(spec.family, 0)
    return family_rank, spec.launch.options.get("BLOCK", 0), spec.launch.options.get("num_warps", 0)


def _pool_context():
    # fork is fastest, but never after CUDA is initialized in this process
    try:
        import torch

        if torch.cuda.is_initialized():
            return multiprocessing.get_context("spawn")
    except Exception:
        pass
    return multiprocessing.get_context("fork")


def prebuild(cfg: DeploymentConfig, target: str, cache: KernelCache, *, jobs: int | None = None,
             progress: Callable[[SpecResult, int, int], None] | None = None, plan: Plan | None = None,
             lock_timeout: float | None = None, only: set[str] | None = None) -> BuildReport:
    """Build every planned spec into ``cache`` for ``target``; returns what was done.

    ``lock_timeout``: seconds to wait for another process's compile of a spec (default
    $QSA_WARMUP_LOCK_TIMEOUT), after which this process compiles it itself. ``only``: build
    just these spec ids (the others count as cached: a serving process checked them already)."""
    start = time.perf_counter()
    cache.ensure_dirs()
    fp = current_fingerprint(target)
    # memoized, so a server starting on this cache skips planning (and Triton's binder)
    plan = plan or memoized_plan(cfg, target, fp.digest, [cache], offline=True)
    cache.write_manifest(cfg, target, fp, [s.id for s in plan.specs])
    lock_timeout = knobs.lock_timeout() if lock_timeout is None else lock_timeout
    results: list[SpecResult] = []
    todo = []
    for spec in plan.specs:  # cheap pass in this process: most of a warm cache needs no pool
        if (only is not None and spec.id not in only) or cache.verify_entry(cache.read_entry(cfg, target, fp, spec.id), spec).state == "ok":
            results.append(SpecResult(spec.id, "cached"))
            if progress:
                progress(results[-1], len(results), len(plan.specs))
        else:
            todo.append(spec.id)
    jobs = max(1, min(jobs or knobs.jobs(), len(todo))) if todo else 0
    if todo:
        # longest compiles first, so the slowest spec does not start last (LPT scheduling):
        # the widest top-k blocks, then prefill, decode, expansion
        by_id = plan.by_id()
        todo.sort(key=lambda sid: _expected_cost(by_id[sid]), reverse=True)
        cfg_json = json.dumps(cfg.to_dict(), sort_keys=True)
        _inherited[(cfg_json, target)] = plan  # fork copies it (and triton_key(), computed above)
        with cf.ProcessPoolExecutor(jobs, mp_context=_pool_context(), initializer=_worker_init,
                                    initargs=(cache.root, target)) as pool:
            futures = [pool.submit(_worker_build, cfg_json, target, cache.root, sid, lock_timeout) for sid in todo]
            try:
                for fut in cf.as_completed(futures):
                    results.append(fut.result())
                    if progress:
                        progress(results[-1], len(results), len(plan.specs))
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    unloadable = [u for s in plan.specs if only is None or s.id in only
                  if (u := cache.loadable(cache.read_entry(cfg, target, fp, s.id), target)) is not None]
    count = lambda o: sum(r.outcome == o for r in results)  # noqa: E731
    order = {s.id: i for i, s in enumerate(plan.specs)}
    results.sort(key=lambda r: order[r.spec_id])
    return BuildReport(planned=len(plan.specs), compiled=count("compiled"), cached=count("cached"),
                       failed=count("failed"), seconds=time.perf_counter() - start,
                       cache_dir=cache.root, target=target, fingerprint=fp.parts, unloadable=unloadable,
                       results=results)


def check_plan(cfg: DeploymentConfig, target: str, cache: KernelCache, plan: Plan | None = None) -> list[EntryStatus]:
    """The state of every planned spec: ok, missing, corrupt, stale (naming what differs) or
    unloadable (naming the resource and the limit)."""
    plan = plan or build_plan(cfg, target)
    fp = current_fingerprint(target)
    stale = cache.stale_reason(cfg, target, fp)
    statuses = []
    for spec in plan.specs:
        entry = cache.read_entry(cfg, target, fp, spec.id)
        if entry is None and stale is not None:
            statuses.append(EntryStatus(spec.id, "stale", stale))
            continue
        status = cache.verify_entry(entry, spec)
        if status.state == "ok":
            status = cache.loadable(entry, target) or status
        statuses.append(status)
    return statuses
