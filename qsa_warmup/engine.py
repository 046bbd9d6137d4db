"""The compile engine: build a plan's specs into a bound cache without launching them.

Each spec is built by :func:`build_spec` (FlashInfer's pattern): look it up; take the spec's
file lock; look again (another process may have built it meanwhile); take it from another
manifest of the folder that built the same kernel (an overlapping recording or config); only
then compile.
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
import time
from dataclasses import dataclass, field
from typing import Callable

from . import knobs
from . import triton_compat as tc
from ._fs import held_lock
from .cache import BoundCache, CacheFolder, Lookup
from .collect import in_use
from .errors import CacheError, ConfigError
from .planner import Plan, PlannedSpec, build_plan, settle_for
from .recording import plan_source_from_dict

__all__ = ["BuildReport", "SpecResult", "prebuild", "build_spec", "check_plan"]

log = logging.getLogger(__name__)


@dataclass
class SpecResult:
    spec_id: str
    outcome: str  # compiled | cached | fetched (from the shared tier) | failed
    seconds: float = 0.0
    error: str = ""
    remote: dict = field(default_factory=dict)  # the shared tier's counters for this spec
    remote_problems: list = field(default_factory=list)  # what the tier did wrong meanwhile
    repaired: bool = False  # compiled in place of an entry that failed its checksums


@dataclass
class BuildReport:
    planned: int
    compiled: int
    cached: int
    fetched: int
    failed: int
    seconds: float
    cache_dir: str
    target: str
    fingerprint: dict
    unloadable: list = field(default_factory=list)
    results: list = field(default_factory=list)
    remote: dict | None = None  # url, counters and problems of the shared tier

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["results"] = [r.__dict__ for r in self.results]
        d["unloadable"] = [{"spec": u.spec_id, "reason": u.reason} for u in self.unloadable]
        return d


def build_spec(
    cache: BoundCache, spec: PlannedSpec, lock_timeout: float, *, fetch: bool = True
) -> SpecResult:
    """Make ``spec``'s entry valid in the cache's write folder: look it up, take its file lock,
    look again, take it from another manifest of the folder that built the same kernel, fetch
    it from the shared tier (``fetch=False``: the caller just asked it), and compile only if no
    process (on this host or, through the tier's lock, on another) has built it."""
    start = time.perf_counter()
    before, said = cache.tier_counters(), len(cache.tier_problems())
    repaired = False

    def result(outcome: str) -> SpecResult:
        after = cache.tier_counters()
        delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        seconds = time.perf_counter() - start
        problems = cache.tier_problems()[said:]
        return SpecResult(spec.id, outcome, seconds, "", delta, problems, repaired)

    if cache.lookup(spec).ok:
        return result("cached")
    with held_lock(cache.write_folder.lock_path(spec.key_digest), lock_timeout):
        found = cache.lookup(spec)
        if found.ok:
            return result("cached")
        if found.state == "corrupt" and found.entry:
            log.warning("%s: %s; rebuilding", spec.id, found.reason)
            cache.purge(found, cache.write_folder)
            repaired = True
        if cache.adopt_from_sibling(spec) and cache.lookup(spec).ok:
            return result("cached")
        if fetch and cache.fill_from_tier([spec]) and cache.lookup(spec).ok:
            return result("fetched")
        with cache.build_turn(spec, lock_timeout) as fetched:
            if fetched and cache.lookup(spec).ok:
                return result("fetched")
            _compile(cache, spec)
        return result("compiled")


def _compile(cache: BoundCache, spec: PlannedSpec) -> dict:
    # No verified entry: Triton's own files for this kernel (if any) are unverified, so
    # compile afresh rather than take them; the entry then records what was just built.
    with tc.forced_compile():
        # the entry's hash must be the plan's, whatever compiled first here
        settle_for(cache.config)
        compiled = spec.launch.warmup()
    return cache.record(spec, compiled)


# -- worker processes -----------------------------------------------------------------------

# The parent's plan, inherited by forked workers so that they do not plan again.
_inherited: dict[tuple[str, str], Plan] = {}


@functools.lru_cache(maxsize=4)
def _worker_cache(
    cfg_json: str, target: str, root: str, remote_url: str | None
) -> tuple[BoundCache, dict]:
    plan = _inherited.get((cfg_json, target))
    cfg = plan.config if plan else plan_source_from_dict(json.loads(cfg_json))
    plan = plan or build_plan(cfg, target)
    # forked from a process that may hold the kernels already: their files must still be written
    tc.forget_compiled({spec.launch.kernel for spec in plan.specs})
    return BoundCache(cfg, target, CacheFolder(root), remote_url=remote_url), plan.by_id()


def _worker_init(root: str, target: str, log_level: int) -> None:
    logging.basicConfig(level=log_level)
    folder = CacheFolder(root)
    tc.set_triton_cache(folder.triton_dir)
    tc.store_binaries_only(True)
    tc.install_memoized_toolchain_identity(folder.memo_dir)
    tc.set_active_target(tc.parse_target(target))


def _worker_build(
    cfg_json: str,
    target: str,
    root: str,
    remote_url,
    spec_id: str,
    lock_timeout: float,
    known_bad: dict,
) -> SpecResult:
    try:
        cache, by_id = _worker_cache(cfg_json, target, root, remote_url)
        cache.mark_tier_bad(known_bad)  # found bad by the parent: counted there
        return build_spec(cache, by_id[spec_id], lock_timeout, fetch=False)
    except Exception as exc:  # reported per spec by the parent; the traceback only when verbose
        log.info("building %s failed", spec_id, exc_info=True)
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


def _run_pool(
    cache: BoundCache, plan: Plan, todo: list[str], jobs: int, lock_timeout: float, progress
):
    # longest compiles first, so the slowest spec does not start last (LPT scheduling):
    # the widest top-k blocks, then prefill, decode, expansion
    by_id = plan.by_id()
    todo = sorted(todo, key=lambda sid: _expected_cost(by_id[sid]), reverse=True)
    cfg_json = json.dumps(cache.config.to_dict(), sort_keys=True)
    _inherited[(cfg_json, cache.target)] = (
        plan  # fork copies it (and triton_key(), computed already)
    )
    root = cache.write_folder.root
    # a tier this process found down (not merely too slow for a start) is not tried again by
    # each worker
    remote_url = cache.tier_url_for_builds()
    with cf.ProcessPoolExecutor(
        jobs,
        mp_context=_pool_context(),
        initializer=_worker_init,
        initargs=(root, cache.target, logging.getLogger().getEffectiveLevel()),
    ) as pool:
        futures = [
            pool.submit(
                _worker_build,
                cfg_json,
                cache.target,
                root,
                remote_url,
                sid,
                lock_timeout,
                cache.tier_bad() if remote_url else {},
            )
            for sid in todo
        ]
        try:
            for fut in cf.as_completed(futures):
                progress(fut.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def prebuild(
    cache: BoundCache,
    *,
    plan: Plan | None = None,
    jobs: int | None = None,
    progress: Callable[[SpecResult, int, int], None] | None = None,
    lock_timeout: float | None = None,
    only: set[str] | None = None,
    fetch_first: bool = True,
    count: bool = True,
) -> BuildReport:
    """Build every planned spec into ``cache`` (its write folder); returns what was done.

    ``lock_timeout``: seconds to wait for another process's compile of a spec (default
    $QSA_WARMUP_LOCK_TIMEOUT), after which this process compiles it itself. ``only``: build
    just these spec ids (the others count as cached: a serving process checked them already).
    ``fetch_first``: ask the shared tier for what is missing before building (False: the
    caller just did). ``count``: add this build to the cache's counters (False: the caller, the
    startup hook, counts its whole start).
    Raises CacheError when something needs building and no layer is writable."""
    with in_use(cache.primary):  # gc waits until the build is done
        start = time.perf_counter()
        problem = cache.tier_key_problem()
        if problem:
            raise ConfigError(knobs.REMOTE_KEY_ENV, problem)
        plan = plan or cache.plan(
            offline=True
        )  # memoized: a server starting on this cache skips planning
        lock_timeout = knobs.lock_timeout() if lock_timeout is None else lock_timeout
        results: list[SpecResult] = []

        def done(result: SpecResult) -> None:
            results.append(result)
            if progress:
                progress(result, len(results), len(plan.specs))

        todo = []
        for spec in plan.specs:  # cheap pass in this process: most of a warm cache needs no pool
            if (only is not None and spec.id not in only) or cache.lookup(spec).ok:
                done(SpecResult(spec.id, "cached"))
            else:
                todo.append(spec.id)
        if todo and fetch_first and cache.write_folder is not None:
            todo = _fetch_first(cache, plan, todo, done)
        if todo and cache.write_folder is None:
            raise CacheError(
                cache.primary.root,
                f"read-only, and {len(todo)} of {len(plan.specs)} specs are not "
                "built; build into a writable --cache-dir, then copy or mount it",
            )
        if cache.write_folder is not None:
            cache.write_folder.ensure_dirs()
            cache.write_manifest([s.id for s in plan.specs])
        if todo:
            jobs = max(1, min(jobs or knobs.jobs(), len(todo)))
            _run_pool(cache, plan, todo, jobs, lock_timeout, done)
        unloadable = [
            u
            for s in plan.specs
            if only is None or s.id in only
            if (u := cache.loadable(cache.lookup(s))).state == "unloadable"
        ]
        if count and cache.write_folder is not None:
            from .stats import add_counts

            add_counts(
                cache.write_folder,
                builds=1,
                compiles=sum(r.outcome == "compiled" for r in results),
                fetched=sum(r.outcome == "fetched" for r in results),
                rebuilt_after_damage=sum(r.repaired for r in results),
            )
        order = {s.id: i for i, s in enumerate(plan.specs)}
        results.sort(key=lambda r: order[r.spec_id])
        count = lambda o: sum(r.outcome == o for r in results)  # noqa: E731
        return BuildReport(
            planned=len(plan.specs),
            compiled=count("compiled"),
            cached=count("cached"),
            fetched=count("fetched"),
            failed=count("failed"),
            seconds=time.perf_counter() - start,
            cache_dir=cache.primary.root,
            target=cache.target,
            fingerprint=cache.fingerprint.parts,
            unloadable=unloadable,
            results=results,
            remote=_remote_summary(cache, results),
        )


def _fetch_first(cache: BoundCache, plan: Plan, todo: list[str], done) -> list[str]:
    """Fetch what the shared tier holds of ``todo`` in this process (two round trips); the
    spec ids still to build."""
    by_id = plan.by_id()
    start = time.perf_counter()
    with held_lock(cache.write_folder.lock_path("remote-fetch"), 60):
        fetched = cache.fill_from_tier([by_id[sid] for sid in todo])
    for sid in todo:
        if sid in fetched and cache.lookup(by_id[sid]).ok:
            done(SpecResult(sid, "fetched", time.perf_counter() - start))
    return [sid for sid in todo if sid not in fetched]


def _remote_summary(cache: BoundCache, results: list[SpecResult]) -> dict | None:
    """The tier's counters of this build, the workers' folded into this process's first (so
    that the bound cache's counters are the whole build's, whoever reads them)."""
    for r in results:
        cache.add_tier_counts(r.remote, r.remote_problems)
    return cache.tier_report(with_problems=True)


def check_plan(cache: BoundCache, plan: Plan | None = None) -> list[Lookup]:
    """The state of every planned spec: ok, missing, corrupt, stale (naming what differs) or
    unloadable (naming the resource and the limit)."""
    return cache.check(plan or build_plan(cache.config, cache.target))
