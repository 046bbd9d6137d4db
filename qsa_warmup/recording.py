"""Recordings: every Triton compile request a real run made, for kernels nobody declared, kept as
a plan source beside the QSA deployments.

A recording file holds JSON lines, one request each (format ``qsa-warmup-recording``, a
version): the kernel's module and qualified name, a hash of its source, Triton's in-memory key
and specialization data, and the target. Several processes append to one file at once (a lock
around each write, one write per line), so tensor-parallel ranks lose nothing; loading merges
files and drops duplicates (the same kernel, key and target). Building a recording imports each
kernel where it is built: a kernel whose source changed since, or whose module cannot be
imported, is refused by name with the fix, never skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field

from . import knobs
from . import triton_compat as tc
from ._fs import files_digest
from .errors import ConfigError, RecordingError

log = logging.getLogger(__name__)

__all__ = [
    "plan_source_from_dict",
    "FORMAT",
    "VERSION",
    "Recording",
    "RecordingError",
    "RecordedLaunch",
    "load_recordings",
    "start_recording",
    "start_recording_from_knobs",
    "record_environment",
    "stop_recording",
    "append_requests",
]

FORMAT = "qsa-warmup-recording"
# 2: lines of kind "autotune-winner" beside the requests (version 1 files hold requests only)
VERSION = 2
WINNER = "autotune-winner"


# -- writing ------------------------------------------------------------------------------------


def append_requests(path: str, requests, winners=()) -> None:
    """Append ``requests`` (and autotune ``winners``) to the recording at ``path``: one write of
    whole lines under an exclusive lock, so processes recording into one file at once never
    interleave."""
    tagged = [r.to_json() for r in requests] + [{"kind": WINNER, **w.to_json()} for w in winners]
    lines = "".join(
        json.dumps({"format": FORMAT, "version": VERSION, **obj}, sort_keys=True) + "\n"
        for obj in tagged
    )
    if not lines:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = lines.encode()
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)  # closing releases the lock


class _Recorder:
    """Writes each new request of this process as it is made (a crash loses none)."""

    def __init__(self, path: str, block: bool):
        self.path, self.block = path, block
        self.seen: set = set()
        self.lock = threading.Lock()
        self.context = None

    def __call__(self, request) -> None:
        from .strict import warming_here

        if warming_here():  # a warmup's own builds are already planned
            return
        with self.lock:
            if request.identity in self.seen:
                return
            self.seen.add(request.identity)
        self._append([request], ())

    def winner(self, autotuner, key, config_items) -> None:
        """An autotuner chose its config for ``key``: kept, so a server need not benchmark."""
        winner = tc.winner_of(autotuner, key, config_items)
        with self.lock:
            if winner.identity in self.seen:
                return
            self.seen.add(winner.identity)
        self._append((), [winner])

    def _append(self, requests, winners) -> None:
        try:
            append_requests(self.path, requests, winners)
        except OSError as exc:  # recording must never stop the run it records
            log.warning("cannot append to recording %s: %s", self.path, exc)


_active: list[_Recorder] = []


def start_recording(path: str, *, block: bool = False) -> None:
    """Record every Triton compile request of this process into ``path`` from now on (appends;
    several processes may share the file). ``block``: skip each compile (recording launchers
    that run on CPU tensors under the offline driver)."""
    path = os.path.abspath(path)
    if any(r.path == path for r in _active):
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    recorder = _Recorder(path, block)
    recorder.context = contextlib.ExitStack()
    recorder.context.enter_context(tc.recording_requests(recorder, block=block))
    recorder.context.enter_context(tc.recording_autotune_winners(recorder.winner))
    _active.append(recorder)
    log.info("recording Triton compile requests into %s", path)


def start_recording_from_knobs() -> bool:
    """Start recording where ``$QSA_WARMUP_RECORD`` names a file (``$QSA_WARMUP_RECORD_TARGET``:
    under the offline driver for that target, compiling nothing); True if recording."""
    path = knobs.record_path()
    if not path:
        return False
    target = knobs.record_target()
    if target:
        tc.set_active_target(tc.parse_target(target))
        tc.OfflineDriver.calls_to_benchmark = True  # autotuners ask for every config
    start_recording(path, block=bool(target))
    return True


def record_environment(path: str, target: str | None) -> dict:
    """The environment ``qsa-warmup record`` runs its command in: the knobs, and a folder on
    PYTHONPATH whose ``sitecustomize`` starts recording in every Python process."""
    import qsa_warmup

    boot = os.path.join(os.path.dirname(qsa_warmup.__file__), "_record_boot")
    env = knobs.environment()
    env[knobs.RECORD_ENV] = path
    env.pop(knobs.RECORD_TARGET_ENV, None)
    if target:
        env[knobs.RECORD_TARGET_ENV] = target
    env["PYTHONPATH"] = os.pathsep.join(p for p in (boot, env.get("PYTHONPATH", "")) if p)
    return env


def stop_recording() -> None:
    while _active:
        _active.pop().context.__exit__(None, None, None)


# -- reading --------------------------------------------------------------------------------------


def _parse_line(path: str, number: int, line: str):
    where = f"{path}:{number}"
    try:
        obj = json.loads(line)
    except ValueError:
        return None, (where, "not a JSON line; re-record it")
    if isinstance(obj, dict) and obj.get("kind") == WINNER:
        return _winner_from(obj, where)
    return _request_from(obj, where)


def _winner_from(obj, where: str):
    """(the autotune winner, None) from one decoded line, else (None, (where, why))."""
    problem = _format_problem(obj, where)
    if problem:
        return None, problem
    try:
        return tc.AutotuneWinner.from_json(obj), None
    except (KeyError, TypeError, ValueError):
        return None, (where, "an incomplete autotune winner; re-record it")


def _format_problem(obj, where: str):
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        return (where, f"not a {FORMAT} line")
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        return (where, f"format version {version!r}; this qsa-warmup reads up to {VERSION}")
    return None


def _request_from(obj, where: str):
    """(the request, None) from one decoded line or manifest entry, else (None, (where, why))."""
    problem = _format_problem(obj, where)
    if problem:
        return None, problem
    fields = tc.RecordedRequest.__dataclass_fields__
    try:
        request = tc.RecordedRequest(**{k: obj[k] for k in fields if k in obj})
        json.loads(request.specialization)
    except (TypeError, ValueError):
        return None, (where, "an incomplete request; re-record it")
    return request, None


@dataclass
class Recording:
    """Requests (and autotune winners) merged from one or more recording files, duplicates
    dropped."""

    paths: list[str]
    requests: list = field(default_factory=list)
    retarget: bool = False  # build for a target other than the one recorded (--retarget)
    winners: list = field(default_factory=list)  # tc.AutotuneWinner, one per identity

    @property
    def name(self) -> str:
        return ",".join(self.paths)

    @property
    def targets(self) -> list[str]:
        return sorted({r.target for r in self.requests})

    @property
    def target(self) -> str:
        """The target the recording came from (the first, where several recorded into it)."""
        return self.targets[0] if self.requests else "sm_90"

    def geometry_hash(self) -> str:
        """Identity of what is recorded (the cache keeps one manifest per recording)."""
        h = hashlib.sha256()
        for r in sorted(self.requests, key=lambda r: r.identity):
            h.update(json.dumps([*r.identity, r.source_hash, r.specialization]).encode())
        return "rec" + h.hexdigest()[:13]

    def to_dict(self) -> dict:
        """The whole recording (a manifest or a bundle describes itself: it can be planned and
        checked again from this alone)."""
        return {
            "recording": {
                "format": FORMAT,
                "version": VERSION,
                "files": self.paths,
                "targets": self.targets,
                "kernels": sorted({f"{r.module}.{r.qualname}" for r in self.requests}),
                "requests": [r.to_json() for r in self.requests],
                "winners": [w.to_json() for w in self.winners],
            }
        }

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "recording") -> "Recording":
        body = data.get("recording") if isinstance(data, dict) else None
        if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
            raise ConfigError(source, "not a recording")
        version, problems = body.get("version", VERSION), []

        def parsed(objs, parse, where):
            items = []
            for number, obj in enumerate(objs, 1):
                tagged = {"format": FORMAT, "version": version, **obj}
                item, problem = parse(tagged, f"{source}:{where}{number}")
                if problem:
                    problems.append(problem)
                else:
                    items.append(item)
            return items

        requests = parsed(body["requests"], _request_from, "")
        winners = parsed(body.get("winners") or [], _winner_from, "winner ")
        if problems:
            raise RecordingError(source, problems)
        return cls(list(body.get("files", [])), requests, winners=winners)

    def give_autotune_winners(self, target: str) -> tuple[int, list[str]]:
        """Hand each winner measured on a ``target`` GPU to its autotuner in this process (it
        then neither benchmarks nor compiles for that key); (winners given, problems). A winner
        picked under the offline driver is not given: the server's autotuner benchmarks that
        key once, among configs that are all built."""
        given, problems = 0, []
        for winner in self.winners:
            if not winner.measured or winner.target != target:
                continue
            name = f"{winner.module}.{winner.qualname}"
            autotuner = tc.find_autotuner(winner.module, winner.qualname)
            if autotuner is None:
                problems.append(f"{name}: no triton.autotune kernel of that name to give its "
                                "recorded winner to; record again")  # fmt: skip
            elif tc.source_hash(tc.tuned_jit_function(autotuner)) != winner.source_hash:
                problems.append(f"{name}: source changed since its winner was recorded; "
                                "record again")  # fmt: skip
            elif not tc.apply_autotune_winner(autotuner, winner):
                problems.append(f"{name}: the recorded winner {dict(winner.config)} is none of "
                                "its configs now; record again")  # fmt: skip
            else:
                given += 1
        return given, problems

    def check_target(self, target: str, field: str = "target") -> None:
        """ConfigError unless this Triton compiles for ``target`` and the recording may be built
        for it (recorded there, or ``retarget``)."""
        try:
            tc.parse_target(target)
        except ValueError as exc:
            raise ConfigError(field, str(exc)) from None
        others = [t for t in self.targets if t != target]
        if others and not self.retarget:
            raise ConfigError(
                field,
                f"{self.name} was recorded on {', '.join(self.targets)}, not {target}: record on "
                f"a {target} GPU, or pass --retarget to build it for {target}",
            )

    def build_plan(self, target: str | None = None, *, offline: bool = True, memo=None):
        from .planner import recording_plan

        return recording_plan(
            self, target or self.target, offline=offline, retarget=self.retarget, memo=memo
        )

    def plan_digest(self) -> str:
        """Identity of what this recording's plan is computed from besides target and
        toolchain (both in the manifest's name): the requests, ``retarget``, the knobs Triton's
        binder folds into keys, and the code that plans a recording. Kernel source is compared
        with the recorded one at every plan, memo or not."""
        return _planner_digest(
            f"{self.geometry_hash()}|{self.retarget}|{tc.binding_knobs()}".encode()
        )


@functools.lru_cache(maxsize=8)
def _planner_digest(source: bytes) -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    planners = [
        __file__,
        os.path.join(here, "planner.py"),
        os.path.join(here, "triton_compat", "recorded.py"),
    ]
    return files_digest(planners, seed=source)


def load_recordings(paths, *, retarget: bool = False) -> Recording:
    """Merge the recordings at ``paths`` (a list, or one comma-separated string)."""
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p.strip()]
    paths = [os.path.abspath(os.path.expanduser(p.strip())) for p in paths]
    if not paths:
        raise ConfigError("recording", "no recording file given")
    merged, winners, seen, problems = [], {}, set(), []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise ConfigError("recording", f"cannot read {path}: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            item, problem = _parse_line(path, number, line)
            if problem:
                problems.append(problem)
            elif isinstance(item, tc.AutotuneWinner):
                # a winner measured on a GPU beats one picked under the offline driver
                kept = winners.get(item.identity)
                if kept is None or (item.measured and not kept.measured):
                    winners[item.identity] = item
            elif item.identity not in seen:
                seen.add(item.identity)
                merged.append(item)
    if problems:
        raise RecordingError(",".join(paths), problems)
    return Recording(paths, merged, retarget, list(winners.values()))


# -- building -------------------------------------------------------------------------------------


class RecordedLaunch:
    """A recorded request as the engine and the loader use a launch: its JIT function, its
    options and constexprs, and ``warmup()`` (Triton's preload: compile for the active driver's
    target and keep it under the recorded key)."""

    def __init__(self, fn, specialization: str):
        self.kernel = fn
        self.specialization = specialization

    @functools.cached_property
    def options(self) -> dict:
        """Constexprs, warps and stages by name (for explain and the build report): decoded
        when first asked, as a warm start never asks."""
        data = json.loads(self.specialization)
        names = self.kernel.arg_names
        constants = {
            (names[k[0]] if len(k) == 1 and k[0] < len(names) else str(k)): v
            for k, v in zip(map(tuple, data["constant_keys"]), data["constant_vals"])
        }
        opts = tc.recorded_options(self.specialization)
        return {
            **constants,
            "num_warps": opts.get("num_warps", 4),
            "num_stages": opts.get("num_stages", 3),
        }

    @property
    def kernel_name(self) -> str:
        return self.kernel.fn.__name__

    def warmup(self):
        # a memoized plan may come from another host: its library paths are localized here
        return tc.preload_recorded(self.kernel, tc.localized_specialization(self.specialization))


def plan_source_from_dict(data: dict, *, source: str = "config"):
    """A deployment config or a recording, from what ``to_dict`` wrote (a manifest, a bundle,
    a build worker's arguments)."""
    if isinstance(data, dict) and "recording" in data:
        return Recording.from_dict(data, source=source)
    if isinstance(data, dict) and "family" in data:
        from .families import FamilyDeployment

        return FamilyDeployment.from_dict(data, source=source)
    from .qsa.config import DeploymentConfig

    return DeploymentConfig.from_dict(data, source=source)
