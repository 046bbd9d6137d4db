"""``qsa-warmup``: plan, prebuild, check and inspect the QSA kernel cache.

Exit codes: 0 ok; 1 check found problems; 2 usage, config or environment error (one line on
stderr naming what is wrong and the fix); 3 internal error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass, field

from . import knobs
from .errors import BundleError, CacheError, ConfigError, RecordingError, RemoteUnavailable

__all__ = ["main"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

log = logging.getLogger(__name__)


def _note(msg: str) -> None:
    print(f"qsa-warmup: {msg}", file=sys.stderr)


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (and exit 2) instead of the usage text."""

    def error(self, message):
        raise _UsageError(f"{message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--config", metavar="FILE", help="deployment config (JSON)")
    from .qsa.config import DEFAULT_PRESET, PRESETS

    common.add_argument(
        "--preset",
        metavar="NAME",
        help=f"embedded config: {', '.join(PRESETS)} (default: {DEFAULT_PRESET})",
    )
    common.add_argument(
        "--target",
        metavar="SM[,SM...]|all",
        help="GPU targets such as sm_90 or sm_90,sm_100, or 'all' (every target this Triton "
        "builds that the config's dtypes run on); default: this GPU, else the config's",
    )
    common.add_argument(
        "--cache-dir",
        metavar="DIR",
        help=f"cache folder (default: ${knobs.CACHE_DIR_ENV} or the user cache)",
    )
    common.add_argument(
        "--jobs", type=int, metavar="N", help="parallel compile processes (default: all cores)"
    )
    common.add_argument(
        "--recording",
        metavar="FILE[,FILE]",
        help="a recording of a real run (qsa-warmup record) as the plan, instead of a config",
    )
    common.add_argument(
        "--family",
        metavar="NAME|MODULE:ATTR",
        help="a kernel family (entry point qsa_warmup.families, or an import path); "
        "--config is then that family's config",
    )
    common.add_argument(
        "--retarget",
        action="store_true",
        help="build a recording for a target other than the one it was recorded on",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true")
    parser = _Parser(
        prog="qsa-warmup", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser(
        "plan", parents=[common], help="list every specialization the launchers can reach"
    )
    pre = sub.add_parser("prebuild", parents=[common], help="compile the plan into the cache")
    pre.add_argument(
        "--only", help=argparse.SUPPRESS
    )  # comma-separated spec ids (the startup hook)
    pre.add_argument("--lock-timeout", type=float, help=argparse.SUPPRESS)
    check = sub.add_parser(
        "check", parents=[common], help="fail unless every planned spec is cached and intact"
    )
    check.add_argument(
        "--trace",
        action="store_true",
        help="also run the launchers over the envelope and fail on any unplanned specialization",
    )
    check.add_argument("--seed", type=int, default=0, help="seed of the --trace sweep")
    check.add_argument(
        "--explain",
        action="store_true",
        help="for each spec not ready: what differs from the nearest cached entry, what to do",
    )
    explain = sub.add_parser(
        "explain",
        parents=[common],
        help="why a planned spec is missing or stale: its key against the nearest entry",
    )
    explain.add_argument("spec_id", metavar="SPEC_ID", help="a spec id, as `plan` lists them")
    info = sub.add_parser(
        "info", parents=[common], help="fingerprint, cache folder, entry count and size"
    )
    for p in (pre, check, info):
        p.add_argument(
            "--remote",
            metavar="URL",
            help="shared tier: redis://host:port/db?prefix=..&ttl=s (or unix:///path.sock)",
        )
        p.add_argument(
            "--remote-readonly", action="store_true", help="fetch from the tier, never publish"
        )
    _add_expect_fingerprint(pre)
    export = sub.add_parser(
        "export",
        parents=[common],
        help="write the cache's builds (all, or the config's, or --target's) to one bundle file",
    )
    _add_expect_fingerprint(export)
    export.add_argument("--out", metavar="FILE", required=True, help="the bundle to write")
    export.add_argument(
        "--compression", choices=("zstd", "gzip"), help="default: zstd if installed, else gzip"
    )
    imp = sub.add_parser(
        "import",
        parents=[common],
        help="verify a bundle in full, then install it into the cache",
    )
    stats = sub.add_parser(
        "stats",
        help="what the cache holds (manifests, entries, bytes) and what was done with it",
    )
    stats.add_argument("--zero", action="store_true", help="reset the counters")
    gc = sub.add_parser(
        "gc",
        help="remove what no manifest needs, and old or least recently used manifests",
    )
    gc.add_argument(
        "--max-size",
        metavar="SIZE",
        help="drop least recently used manifests until the cache fits (500M, 2G, 1.5GiB)",
    )
    gc.add_argument(
        "--older-than", metavar="AGE", help="drop manifests not used for AGE (30d, 12h, 90s)"
    )
    gc.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    clear = sub.add_parser("clear", help="remove everything the cache holds")
    record = sub.add_parser(
        "record",
        help="run COMMAND and record every Triton compile request it makes, for any kernel",
    )
    record.add_argument("--out", metavar="FILE", required=True, help="the recording (appended)")
    record.add_argument(
        "--target",
        metavar="SM",
        help="record under the offline driver for this target, compiling and launching nothing "
        "(for code whose launchers run on CPU tensors); default: the GPU COMMAND runs on",
    )
    record.add_argument("-v", "--verbose", action="store_true")
    record.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    for p in (stats, gc, clear):
        p.add_argument("--cache-dir", metavar="DIR")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("-v", "--verbose", action="store_true")
    imp.add_argument("bundle", metavar="FILE")
    imp.add_argument(
        "--force", action="store_true", help="install deployments of another toolchain too"
    )
    return parser


def _version() -> str:
    import platform
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"qsa-warmup {version('qsa-warmup')} (triton {version('triton')}, "
        f"python {platform.python_version()})"
    )


def _add_expect_fingerprint(parser) -> None:
    parser.add_argument(
        "--expect-fingerprint",
        metavar="FILE",
        help="a server's `qsa-warmup info --json`: refuse unless this toolchain matches it",
    )


def _source(args):
    """The plan source the flags name: a recording (``--recording``), else a config."""
    from .qsa.config import load_config

    if args.config and args.preset:
        raise ConfigError("--preset", "give --config or --preset, not both")
    if args.family:
        if args.recording or args.preset:
            raise ConfigError("--family", "give --family with --config, not --recording/--preset")
        from .families import deployment

        return deployment(args.family, _family_config(args.config))
    if args.recording:
        if args.config or args.preset:
            raise ConfigError("--recording", "give --recording or --config/--preset, not both")
        from .recording import load_recordings

        return load_recordings(args.recording, retarget=args.retarget)
    if args.retarget:
        raise ConfigError("--retarget", "applies to --recording only")
    return load_config(args.config, args.preset)


def _family_config(path: str | None) -> dict:
    if not path:
        raise ConfigError("--config", "give the family's config as a JSON file")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError("--config", f"{path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError("--config", f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("--config", f"{path} must hold a JSON object")
    return data


def _resolve(args):
    """(config, targets, cache folder) from the flags, every problem named in one error."""
    from .cache import CacheFolder

    if args.jobs is not None and args.jobs < 1:
        raise ConfigError("--jobs", f"must be >= 1, got {args.jobs}")
    cfg = _source(args)
    targets = _targets(args.target, cfg)
    if getattr(args, "remote", None):
        from .remote import RemoteSettings

        RemoteSettings.parse(args.remote)  # a malformed URL is refused before any work
    folder = CacheFolder(args.cache_dir or knobs.cache_dir())
    if args.command != "plan":
        folder.check_usable()
    return cfg, targets, folder


def _targets(flag: str | None, cfg) -> list[str]:
    """The targets ``--target`` names (a list, or ``all``), else this GPU's, else the config's."""
    from . import triton_compat as tc
    from .qsa.config import DeploymentConfig, target_problems

    if not isinstance(cfg, DeploymentConfig):  # a recording's targets, or a family's default
        recorded = getattr(cfg, "targets", None) or [cfg.target]
        names = recorded if not flag or flag == "all" else [n.strip() for n in flag.split(",")]
        for name in names:
            cfg.check_target(name, "--target")
        return list(dict.fromkeys(names))
    if not flag:
        gpu = tc.current_gpu_target()
        target = cfg.target if gpu is None else tc.target_name(gpu)
        if gpu is None:
            log.info("no GPU here and no --target: using the config's target %s", target)
        cfg.check_target(target, "GPU target" if gpu is not None else "target")
        return [target]
    names = [n.strip() for n in flag.split(",")]
    if "all" in names:
        if len(names) > 1:
            raise ConfigError("--target", "give 'all' alone, or a list such as sm_90,sm_100")
        names = [
            f"sm_{arch}"
            for arch in tc.compilable_archs()
            if not target_problems(f"sm_{arch}", cfg.cache_dtypes)
        ]
    if "" in names:
        raise ConfigError("--target", f"empty name in {flag!r}; give e.g. sm_90,sm_100")
    names = list(dict.fromkeys(names))
    problems = [p for n in names for p in target_problems(n, cfg.cache_dtypes, "--target")]
    if problems:
        raise ConfigError.several(problems)
    return names


@dataclass
class _Outcome:
    """One command's result for one target: exit code, the JSON payload, the text lines."""

    code: int
    payload: dict
    lines: list[str] = field(default_factory=list)


def _cmd_plan(args, cfg, target, folder) -> _Outcome:
    from .planner import build_plan

    plan = build_plan(cfg, target)
    payload = {
        "target": target,
        "config": cfg.to_dict(),
        "specs": [
            {
                "id": s.id,
                "family": s.family,
                "kernel": s.kernel,
                "key_digest": s.key_digest,
                "detail": s.detail,
            }
            for s in plan.specs
        ],
    }
    lines = [f"{len(plan.specs)} specializations for {target}"]
    lines += [f"  {s.id:<44} {s.kernel:<24} {s.detail}" for s in plan.specs]
    return _Outcome(EXIT_OK, payload, lines)


class _Progress:
    """A bar on a terminal (tqdm, when installed), else a plain line per finished spec."""

    def __init__(self):
        self.bar = None
        self.tty = sys.stderr.isatty()

    def __call__(self, result, done, total):
        if self.tty:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                if self.bar is None:
                    self.bar = tqdm(total=total, unit="spec", file=sys.stderr, leave=False)
                self.bar.set_postfix_str(f"{result.outcome} {result.spec_id}", refresh=False)
                self.bar.update(1)
                if done == total:
                    self.bar.close()
                return
        if result.outcome != "cached":
            print(f"[{done}/{total}] {result.outcome:<9} {result.spec_id}", file=sys.stderr)


def _cmd_prebuild(args, cfg, target, folder) -> _Outcome:
    from . import triton_compat as tc
    from .cache import BoundCache
    from .engine import prebuild

    cache = BoundCache(
        cfg, target, folder, remote_url=args.remote, remote_readonly=args.remote_readonly
    )
    if cache.write_folder is not None:
        tc.set_triton_cache(cache.write_folder.triton_dir)
    only = set(args.only.split(",")) if args.only else None
    report = prebuild(
        cache,
        jobs=args.jobs,
        progress=None if args.json else _Progress(),
        only=only,
        lock_timeout=args.lock_timeout,
        fetch_first=only is None,  # --only: the startup hook asked the tier just before
        count=only is None,  # and counts its start itself
    )
    lines = [
        f"{report.planned} planned: {report.compiled} compiled, {report.cached} cached, "
        f"{report.fetched} fetched, {report.failed} failed in {report.seconds:.1f} s -> "
        f"{report.cache_dir} ({target})"
    ]
    if report.remote:
        r = report.remote
        lines.append(
            f"  shared tier {r['url']}: {r['hits']} hits, {r['misses']} misses, "
            f"{r['bytes_fetched']} bytes fetched, {r['published']} published"
            + (f", {r['poisoned']} poisoned" if r["poisoned"] else "")
        )
    lines += [f"  FAILED {r.spec_id}: {r.error}" for r in report.results if r.outcome == "failed"]
    lines += [f"  UNLOADABLE {u.spec_id}: {u.reason}" for u in report.unloadable]
    if cache.write_folder is None:
        _note(
            f"{folder.root} is read-only here and already holds all {report.planned} specs "
            f"for {target}; nothing to build"
        )
    code = EXIT_OK
    if report.failed:
        first = next(r for r in report.results if r.outcome == "failed")
        _note(
            f"{report.failed} of {report.planned} specs failed to build for {target} (first: "
            f"{first.spec_id}: {first.error.splitlines()[0] if first.error else '?'}); "
            "rerun with -v for the compiler's log"
        )
        code = EXIT_USAGE
    return _Outcome(code, report.to_json(), lines)


def _cmd_check(args, cfg, target, folder) -> _Outcome:
    from .cache import BoundCache
    from .engine import check_plan
    from .planner import build_plan

    plan = build_plan(cfg, target)
    cache = BoundCache(
        cfg, target, folder, remote_url=args.remote, remote_readonly=args.remote_readonly
    )
    statuses = check_plan(cache, plan)
    failing = [s for s in statuses if not s.ok]
    out = {
        "target": target,
        "cache_dir": folder.root,
        "planned": len(plan.specs),
        "ok": len(statuses) - len(failing),
        "failing": [{"spec": s.spec_id, "state": s.state, "reason": s.reason} for s in failing],
    }
    lines = [f"{s['state'].upper():<11} {s['spec']}: {s['reason']}" for s in out["failing"]]
    if cache.remote is not None:
        out["remote"] = _remote_check(cache, plan)
        held = set(out["remote"]["held"])
        failing = [s for s in failing if s.spec_id not in held]
        lines.append(
            f"shared tier {out['remote']['url']}: {len(held)}/{len(plan.specs)} specs held "
            "and verified"
            + "".join(f"\n  {m['spec']}: {m['reason']}" for m in out["remote"]["missing"])
        )
    trace_failed = False
    if args.trace:
        out["trace"] = _trace(cfg, plan, statuses, args.seed)
        t = out["trace"]
        trace_failed = bool(t["unplanned"] or t["uncached"])
        lines += [
            f"UNPLANNED   {v['kernel']} num_warps={v['num_warps']} {v['constants']}"
            for v in t["unplanned"]
        ]
        lines.append(
            f"trace: {t['launches']} launcher calls requested {t['requested']} specializations, "
            f"{len(t['unplanned'])} not in the plan, {len(t['uncached'])} not cached"
        )
    if args.explain:
        from .explain import explain_spec

        explained = [explain_spec(cache, plan, s["spec"]) for s in out["failing"]]
        out["explain"] = [e.to_json() for e in explained]
        lines += [line for e in explained for line in e.lines()]
    lines += _autotune_lines(cfg, plan, target, out)
    lines.append(f"{out['ok']}/{out['planned']} planned specs ready in {folder.root} for {target}")
    return _Outcome(EXIT_CHECK_FAILED if failing or trace_failed else EXIT_OK, out, lines)


def _autotune_lines(source, plan, target: str, out: dict) -> list[str]:
    """What a server's autotuners will still do: every config tried while recording is built
    and loaded; a key whose winner was measured on a ``target`` GPU is handed its winner (no
    benchmark), any other key is benchmarked once among built configs (no compile)."""
    tuned = sorted({s.kernel for s in plan.specs if s.detail.endswith("(autotuning)")})
    if not tuned:
        return []
    measured = {}
    for w in getattr(source, "winners", ()):
        if w.measured and w.target == target:
            kernel = w.qualname.split(".")[-1]  # as the plan names recorded kernels
            measured[kernel] = measured.get(kernel, 0) + 1
    out["autotuned"] = tuned
    out["autotune_winners"] = {k: measured.get(k, 0) for k in tuned}
    lines = []
    stored = [k for k in tuned if measured.get(k)]
    if stored:
        keys = sum(measured[k] for k in stored)
        lines.append(
            f"autotuned kernels {', '.join(stored)}: every config tried while recording is "
            f"built, and the winners measured on {target} for {keys} keys are stored: a server "
            "neither compiles nor benchmarks those keys; another key is benchmarked once, among "
            "built configs (no compiles)"
        )
    rest = [k for k in tuned if not measured.get(k)]
    if rest:
        lines.append(
            f"autotuned kernels {', '.join(rest)}: every config tried while recording is built; "
            f"no winner measured on a {target} GPU was recorded (record on one to store them): "
            "a server's autotuner still benchmarks them on each new key (no compiles)"
        )
    return lines


def _cmd_explain(args, cfg, target, folder) -> _Outcome:
    from .cache import BoundCache
    from .explain import explain_spec
    from .planner import build_plan

    explained = explain_spec(BoundCache(cfg, target, folder), build_plan(cfg, target), args.spec_id)
    return _Outcome(EXIT_OK, explained.to_json(), explained.lines())


def _remote_check(cache, plan) -> dict:
    """What the shared tier holds of the plan, verified byte for byte; raises (exit 2) when
    the tier cannot be reached or this key is not the fleet's."""
    remote = cache.remote
    remote.ping()
    problem = remote.key_problem()
    if problem:
        raise ConfigError(knobs.REMOTE_KEY_ENV, problem)
    states = remote.held(plan.specs)
    return {
        "url": remote.settings.display,
        "held": sorted(sid for sid, state in states.items() if state == "ok"),
        "missing": [
            {"spec": sid, "reason": state} for sid, state in states.items() if state != "ok"
        ],
    }


def _trace(cfg, plan, statuses, seed: int) -> dict:
    from .families import FamilyDeployment, trace_family
    from .qsa.config import DeploymentConfig

    if isinstance(cfg, FamilyDeployment):
        trace = trace_family(cfg, plan, seed=seed)
    elif isinstance(cfg, DeploymentConfig):
        from .qsa.trace import trace_envelope

        trace = trace_envelope(cfg, plan, seed=seed)
    else:
        raise ConfigError("--trace", "a recording is its own trace; check it without --trace")
    ok_ids = {s.spec_id for s in statuses if s.ok}
    return {
        "launches": trace.launches,
        "requested": trace.requested,
        "unplanned": [
            {"kernel": v.kernel, "constants": v.constants, "num_warps": v.num_warps, "key": v.key}
            for v in trace.unplanned
        ],
        "uncached": sorted(sid for sid in trace.covered if sid not in ok_ids),
        "planned_not_reached": sorted(set(plan.by_id()) - trace.covered),
    }


def _cmd_info(args, cfg, target, folder) -> _Outcome:
    from .cache import Fingerprint

    fp = Fingerprint.current(target)
    info = {
        "cache_dir": folder.root,
        "triton_cache_dir": folder.triton_view(),
        "target": target,
        "fingerprint": fp.parts,
        "fingerprint_digest": fp.digest,
        "writable": folder.writable(),
        **folder.stats(),
    }
    if args.remote:
        from .remote import open_remote

        remote = open_remote(
            args.remote, fp.digest, key=knobs.remote_key(), readonly=args.remote_readonly
        )
        remote.ping()
        info["remote"] = {"url": remote.settings.display, **remote.summary()}
    return _Outcome(EXIT_OK, info, [f"{k:>18}: {v}" for k, v in info.items()])


def _cmd_export(args) -> int:
    from .bundle import export_bundle, manifest_fingerprints, select_manifests
    from .cache import CacheFolder

    folder = CacheFolder(args.cache_dir or knobs.cache_dir())
    folder.check_usable()
    named = args.config or args.preset or args.target or args.recording
    cfg = _source(args) if named else None
    targets = _targets(args.target, cfg) if args.target else None
    names = select_manifests(folder, cfg, targets)
    if args.expect_fingerprint:
        _check_expected_fingerprint(args.expect_fingerprint, manifest_fingerprints(folder, names))
    report = export_bundle(
        folder, names, args.out, key=knobs.remote_key(), compression=args.compression
    )
    _print_bundle_report(
        args,
        report,
        f"{report.files} files, {report.bytes} bytes ({report.compression}"
        f"{', signed' if report.signed else ''}) -> {report.path}\ndigest {report.digest}",
    )
    return EXIT_OK


def _print_bundle_report(args, report, last_line: str) -> None:
    """export's and import's output: the report as JSON, else a line per deployment and one
    closing line."""
    if args.json:
        print(json.dumps(report.__dict__, indent=1))
        return
    for d in report.deployments:
        print(f"  {d['target']:<7} {d['specs']:>4} specs  {d['manifest']}")
    print(last_line)


def _cmd_record(args) -> int:
    """Run the command with recording switched on in every Python process it starts (a
    ``sitecustomize`` on PYTHONPATH, and the knobs it reads); its exit code is returned."""
    import subprocess

    from .recording import record_environment

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise ConfigError("COMMAND", "give the command to record after --, e.g. -- python run.py")
    if args.target:
        from . import triton_compat as tc

        try:
            tc.parse_target(args.target)
        except ValueError as exc:
            raise ConfigError("--target", str(exc)) from None
    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        raise ConfigError("--out", f"{out} is a folder; give a file to append the recording to")
    before = _count_lines(out)
    try:
        code = subprocess.call(cmd, env=record_environment(out, args.target))
    except FileNotFoundError:
        raise ConfigError("COMMAND", f"{cmd[0]}: not found") from None
    added = _count_lines(out) - before
    _note(f"{added} compile requests recorded into {out} (command exited {code})")
    return code


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _cmd_stats(args) -> int:
    from .cache import CacheFolder
    from .stats import cache_stats, zero_counts

    folder = CacheFolder(args.cache_dir or knobs.cache_dir())
    folder.check_usable()
    if args.zero:
        if not folder.writable():
            raise CacheError(folder.root, "is read-only here; its counters cannot be zeroed")
        zero_counts(folder)
    out = cache_stats(folder)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(
            f"{out['cache_dir']}: {out['manifests']} manifests, {out['entries']} entries, "
            f"{out['bytes']} bytes"
        )
        for name, value in out["counters"].items():
            print(f"  {name:<22} {value}")
    return EXIT_OK


def _cmd_gc(args) -> int:
    from .cache import CacheFolder
    from .collect import collect_garbage, parse_age, parse_size
    from .qsa.digest import plan_source_digest

    max_size = parse_size(args.max_size) if args.max_size is not None else None
    older_than = parse_age(args.older_than) if args.older_than is not None else None
    folder = CacheFolder(args.cache_dir or knobs.cache_dir())
    report = collect_garbage(
        folder,
        max_size=max_size,
        older_than=older_than,
        dry_run=args.dry_run,
        plan_digest=plan_source_digest(),
        timeout=knobs.lock_timeout(),
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
        return EXIT_OK
    verb = "would remove" if report.dry_run else "removed"
    for name in report.manifests:
        print(f"  manifest {name}")
    for path in report.stray:
        print(f"  stray {path}")
    print(
        f"{report.cache_dir}: {verb} {len(report.manifests)} manifests, "
        f"{report.triton_folders} Triton folders, {report.plan_memos} plan memos, "
        f"{report.toolchain_memos} toolchain memos, {len(report.stray)} stray paths: "
        f"{report.bytes_before} -> {report.bytes_after} bytes"
    )
    return EXIT_OK


def _cmd_clear(args) -> int:
    from .cache import CacheFolder
    from .collect import clear_cache

    folder = CacheFolder(args.cache_dir or knobs.cache_dir())
    freed = clear_cache(folder, timeout=knobs.lock_timeout())
    if args.json:
        print(json.dumps({"cache_dir": folder.root, "freed": freed}, indent=1))
    else:
        print(f"{folder.root}: cleared, {freed} bytes freed")
    return EXIT_OK


def _cmd_import(args) -> int:
    from .bundle import import_bundle
    from .cache import CacheFolder

    folder = CacheFolder(args.cache_dir or knobs.cache_dir())
    require = None
    if args.config or args.preset or args.target or args.recording:
        cfg = _source(args)
        geometry = cfg.geometry_hash()
        targets = _targets(args.target, cfg) if args.target else None
        require = [f"{geometry}-{t}-" for t in targets] if targets else [f"{geometry}-"]
    report = import_bundle(
        args.bundle, folder, force=args.force, key=knobs.remote_key(), require=require
    )
    _print_bundle_report(
        args,
        report,
        f"verified and installed into {report.cache_dir}: {report.added} files added, "
        f"{report.present} already present (digest {report.digest})",
    )
    return EXIT_OK


def _expected_fingerprints(path: str) -> dict[str, dict]:
    """{target: fingerprint parts} of a server's ``info --json`` output."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError("--expect-fingerprint", f"{path}: {exc.strerror}") from None
    except ValueError:
        raise ConfigError(
            "--expect-fingerprint", f"{path} is not JSON; give it a server's `info --json`"
        ) from None
    payloads = data.get("targets", [data]) if isinstance(data, dict) else []
    found = {
        p["target"]: p["fingerprint"]
        for p in payloads
        if isinstance(p, dict) and isinstance(p.get("fingerprint"), dict) and "target" in p
    }
    if not found:
        raise ConfigError(
            "--expect-fingerprint",
            f"{path} holds no fingerprint; give it the output of `qsa-warmup info --json` "
            "run on the server",
        )
    return found


def _check_expected_fingerprint(path: str, fingerprints: list[tuple[str, dict]]) -> None:
    """ConfigError naming each part where this builder's toolchain (``fingerprints``: (target,
    parts) pairs) differs from the server's: everything for a target the server runs, the
    target-independent parts (python, triton, env) for the others."""
    from .cache import Fingerprint

    server = _expected_fingerprints(path)
    problems = []
    for target, parts in fingerprints:
        if target in server:
            theirs = server[target]
        else:
            theirs = {
                **next(iter(server.values())),
                **{k: parts.get(k) for k in Fingerprint.TARGET_PARTS},
            }
        problems += [
            (
                "--expect-fingerprint",
                f"{target}: {name} {parts.get(name)} here, {theirs.get(name)} on the server",
            )
            for name in sorted(set(parts) | set(theirs))
            if parts.get(name) != theirs.get(name)
        ]
    if problems:
        hint = (
            "build with the server's Python, Triton and environment (README: matching the "
            "server's toolchain)"
        )
        problems[-1] = (problems[-1][0], f"{problems[-1][1]}; {hint}")
        raise ConfigError.several(problems)


_COMMANDS = {
    "plan": _cmd_plan,
    "prebuild": _cmd_prebuild,
    "check": _cmd_check,
    "info": _cmd_info,
    "explain": _cmd_explain,
}


_FOLDER_COMMANDS = {"stats": _cmd_stats, "gc": _cmd_gc, "clear": _cmd_clear}


def _per_target(args, cfg, targets, folder) -> int:
    """Run the command for each target; JSON: the one payload, or ``{"targets": [...]}``."""
    outcomes = []
    for target in targets:
        outcome = _COMMANDS[args.command](args, cfg, target, folder)
        outcomes.append(outcome)
        if not args.json:
            if len(targets) > 1:
                print(f"== {target}")
            print("\n".join(outcome.lines))
    if args.json:
        payloads = [o.payload for o in outcomes]
        print(json.dumps(payloads[0] if len(payloads) == 1 else {"targets": payloads}, indent=1))
    return max(o.code for o in outcomes)


def _run(argv) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    if args.command == "record":  # the command runs as it would alone: Triton's knobs untouched
        return _cmd_record(args)
    import triton

    if knobs.interpreter_requested():
        _note("TRITON_INTERPRET is set; warmup compiles real kernels, so it is ignored here")
    triton.knobs.runtime.interpret = (
        False  # before kernels is imported: its kernels must be JIT functions
    )
    try:
        if args.command == "export":
            return _cmd_export(args)
        if args.command == "import":
            return _cmd_import(args)
        if args.command in _FOLDER_COMMANDS:
            return _FOLDER_COMMANDS[args.command](args)
        cfg, targets, folder = _resolve(args)
        if getattr(args, "expect_fingerprint", None):
            from .cache import Fingerprint

            _check_expected_fingerprint(
                args.expect_fingerprint, [(t, Fingerprint.current(t).parts) for t in targets]
            )
        return _per_target(args, cfg, targets, folder)
    except Exception:
        if args.verbose:
            traceback.print_exc()
        raise


def _quiet_stdout() -> None:
    # the reader went away (``plan | head -1``): later writes, and the interpreter's final
    # flush, go nowhere instead of raising again
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv=None) -> int:
    try:
        code = _run(argv)
        sys.stdout.flush()
        return code
    except _UsageError as exc:
        _note(f"usage error: {exc}")
    except ConfigError as exc:
        _note(f"config error: {exc}")
    except CacheError as exc:
        _note(f"cache error: {exc}")
    except BundleError as exc:
        _note(f"bundle refused: {exc}")
    except RecordingError as exc:
        _note(f"recording refused: {exc}")
    except RemoteUnavailable as exc:
        _note(f"shared tier error: {exc}")
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        _note("interrupted; entries written so far are complete, nothing partial is visible")
        return EXIT_INTERRUPTED
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _note(
            f"environment error: {where}{exc.strerror or exc}; "
            "check the path's permissions and free space"
        )
    except Exception as exc:  # a bug: one line, the traceback with -v
        _note(f"internal error: {type(exc).__name__}: {exc} (rerun with -v for the traceback)")
        return EXIT_INTERNAL
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
