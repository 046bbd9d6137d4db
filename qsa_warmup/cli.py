"""``qsa-warmup``: plan, prebuild, check and inspect the QSA kernel cache.

Exit codes: 0 ok, 1 check failed, 2 usage or config error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import triton

from . import knobs
from .errors import CacheError, ConfigError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2


def _note(msg: str) -> None:
    print(f"qsa-warmup: {msg}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help="deployment config (JSON)")
    common.add_argument("--preset", metavar="NAME", help="embedded config (default: 'default')")
    common.add_argument("--target", metavar="SM", help="GPU target such as sm_90 (default: this GPU, else the config's)")
    common.add_argument("--cache-dir", metavar="DIR", help=f"cache folder (default: ${knobs.CACHE_DIR_ENV} or the user cache)")
    common.add_argument("--jobs", type=int, metavar="N", help="parallel compile processes (default: all cores)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true")
    parser = argparse.ArgumentParser(prog="qsa-warmup", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("plan", parents=[common], help="list every specialization the launchers can reach")
    pre = sub.add_parser("prebuild", parents=[common], help="compile the plan into the cache")
    pre.add_argument("--only", help=argparse.SUPPRESS)  # comma-separated spec ids (the startup hook)
    pre.add_argument("--lock-timeout", type=float, help=argparse.SUPPRESS)
    check = sub.add_parser("check", parents=[common], help="fail unless every planned spec is cached and intact")
    check.add_argument("--trace", action="store_true",
                       help="also run the launchers over the envelope and fail on any unplanned specialization")
    check.add_argument("--seed", type=int, default=0, help="seed of the --trace sweep")
    sub.add_parser("info", parents=[common], help="fingerprint, cache folder, entry count and size")
    return parser


def _resolve(args):
    from . import triton_compat as tc
    from .config import load_config

    if args.config and args.preset:
        raise ConfigError("--preset", "give --config or --preset, not both")
    cfg = load_config(args.config, args.preset)
    if args.target:
        try:
            tc.parse_target(args.target)
        except ValueError as exc:
            raise ConfigError("--target", str(exc)) from None
        target = args.target
    else:
        gpu = tc.current_gpu_target()
        if gpu is None:
            target = cfg.target
            _note(f"no GPU here and no --target: building for the config's target {target}")
        else:
            target = tc.target_name(gpu)
    if args.jobs is not None and args.jobs < 1:
        raise ConfigError("--jobs", f"must be >= 1, got {args.jobs}")
    from .cache import KernelCache

    return cfg, target, KernelCache(args.cache_dir or knobs.cache_dir())


def _cmd_plan(args, cfg, target, cache) -> int:
    from .planner import build_plan

    plan = build_plan(cfg, target)
    if args.json:
        print(json.dumps({"target": target, "config": cfg.to_dict(), "specs": [
            {"id": s.id, "family": s.family, "kernel": s.kernel, "key_digest": s.key_digest, "detail": s.detail}
            for s in plan.specs]}, indent=1))
    else:
        print(f"{len(plan.specs)} specializations for {target}")
        for s in plan.specs:
            print(f"  {s.id:<44} {s.kernel:<24} {s.detail}")
    return EXIT_OK


def _progress(result, done, total):
    if sys.stderr.isatty():
        print(f"\r[{done}/{total}] {result.outcome:<9} {result.spec_id:<48}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)


def _cmd_prebuild(args, cfg, target, cache) -> int:
    from . import triton_compat as tc
    from .engine import prebuild

    tc.set_triton_cache(cache.triton_dir)
    only = set(args.only.split(",")) if args.only else None
    report = prebuild(cfg, target, cache, jobs=args.jobs, progress=None if args.json else _progress, only=only,
                      lock_timeout=args.lock_timeout)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(f"{report.planned} planned: {report.compiled} compiled, {report.cached} cached, "
              f"{report.failed} failed in {report.seconds:.1f} s -> {report.cache_dir} "
              f"({target})")
        for r in report.results:
            if r.outcome == "failed":
                print(f"  FAILED {r.spec_id}: {r.error}")
        for u in report.unloadable:
            print(f"  UNLOADABLE {u.spec_id}: {u.reason}")
    return EXIT_CHECK_FAILED if report.failed else EXIT_OK


def _cmd_check(args, cfg, target, cache) -> int:
    from .engine import check_plan
    from .planner import build_plan

    plan = build_plan(cfg, target)
    statuses = check_plan(cfg, target, cache, plan)
    failing = [s for s in statuses if s.state != "ok"]
    out = {"target": target, "cache_dir": cache.root, "planned": len(plan.specs), "ok": len(statuses) - len(failing),
           "failing": [{"spec": s.spec_id, "state": s.state, "reason": s.reason} for s in failing]}
    if args.trace:
        from .trace import trace_envelope

        trace = trace_envelope(cfg, plan, seed=args.seed)
        ok_ids = {s.spec_id for s in statuses if s.state == "ok"}
        uncached = sorted(sid for sid in trace.covered if sid not in ok_ids)
        out["trace"] = {"launches": trace.launches, "requested": trace.requested,
                        "unplanned": [{"kernel": v.kernel, "constants": v.constants, "num_warps": v.num_warps,
                                       "key": v.key} for v in trace.unplanned],
                        "uncached": uncached, "planned_not_reached": sorted(set(plan.by_id()) - trace.covered)}
        if trace.unplanned or uncached:
            failing = failing or [None]
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for s in out["failing"]:
            print(f"{s['state'].upper():<11} {s['spec']}: {s['reason']}")
        if args.trace:
            t = out["trace"]
            for v in t["unplanned"]:
                print(f"UNPLANNED   {v['kernel']} num_warps={v['num_warps']} {v['constants']}")
            print(f"trace: {t['launches']} launcher calls requested {t['requested']} specializations, "
                  f"{len(t['unplanned'])} not in the plan, {len(t['uncached'])} not cached")
        print(f"{out['ok']}/{out['planned']} planned specs ready in {cache.root} for {target}")
    return EXIT_CHECK_FAILED if failing else EXIT_OK


def _cmd_info(args, cfg, target, cache) -> int:
    import platformdirs

    from .cache import current_fingerprint

    fp = current_fingerprint(target)
    triton_dir = cache.triton_view(overlay_root=platformdirs.user_cache_dir("qsa-warmup-overlays"))
    info = {"cache_dir": cache.root, "triton_cache_dir": triton_dir, "target": target, "fingerprint": fp.parts,
            "fingerprint_digest": fp.digest, "writable": cache.writable(), **cache.stats()}
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for k, v in info.items():
            print(f"{k:>18}: {v}")
    return EXIT_OK


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if knobs.interpreter_requested():
        _note("TRITON_INTERPRET is set; warmup compiles real kernels, so it is ignored here")
    triton.knobs.runtime.interpret = False  # before kernels is imported: its kernels must be JIT functions
    try:
        cfg, target, cache = _resolve(args)
        return {"plan": _cmd_plan, "prebuild": _cmd_prebuild, "check": _cmd_check, "info": _cmd_info}[args.command](
            args, cfg, target, cache)
    except ConfigError as exc:
        _note(f"config error: {exc}")
        return EXIT_USAGE
    except CacheError as exc:
        _note(f"cache error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _note("interrupted; entries written so far are complete, nothing partial is visible")
        return 130


if __name__ == "__main__":
    sys.exit(main())
