"""Plans: the specs a plan source needs built and loaded, one per distinct Triton cache key.

A plan source is a QSA deployment config (planned by ``qsa_warmup.qsa``), a kernel family's
deployment (``families``) or a recording (``recording``). Keys come from Triton's binder under
the target's driver, so two points that compile to the same variant are one spec, and a
variant that differs only in an argument specialization (alignment, divisibility) is its own.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from dataclasses import dataclass

from . import triton_compat as tc

log = logging.getLogger(__name__)

__all__ = [
    "PlannedSpec",
    "Plan",
    "build_plan",
    "recording_plan",
    "family_plan",
    "settle_for",
    "unique_spec_id",
]


@dataclass
class PlannedSpec:
    id: str
    family: str  # the family (QSA: decode | prefill | topk | expand), or "recorded"
    kernel: str
    launch: object  # .kernel (the JIT function), .options, .warmup(); a family's also .args
    key: str = ""  # Triton's in-memory cache key for this launch on the target
    detail: str = ""
    point: tuple = ()  # the envelope point launch_for() rebuilds the launch from
    compile_hash: str = (
        ""  # Triton's compile hash (source, options, toolchain): what a built entry must match
    )
    specialization: str = ""  # Triton's binding of the launch (triton_compat.specialization_data)

    @property
    def key_digest(self) -> str:
        return hashlib.sha256(f"{self.kernel}|{self.key}".encode()).hexdigest()[:16]


@dataclass
class Plan:
    config: object  # the plan source: a DeploymentConfig, a FamilyDeployment or a Recording
    target: str
    specs: list[PlannedSpec]

    def by_id(self) -> dict[str, PlannedSpec]:
        return {s.id: s for s in self.specs}

    def by_request(self) -> dict[tuple[str, str], PlannedSpec]:
        return {(s.kernel, s.key): s for s in self.specs}

    def to_memo(self) -> list:
        return [
            {
                "id": s.id,
                "family": s.family,
                "kernel": s.kernel,
                "point": list(s.point),
                "key": s.key,
                "detail": s.detail,
                "compile_hash": s.compile_hash,
                "specialization": s.specialization,
            }
            for s in self.specs
        ]


def build_plan(cfg, target: str | None = None, *, offline: bool = True, memo: list | None = None):
    """The plan of a plan source on ``target`` (default: the source's). Needs compiled-mode
    Triton. ``offline=False`` binds under the real driver (a serving process on that target's
    GPU). ``memo``: a QSA plan's :meth:`Plan.to_memo` (see ``qsa.planning.build_qsa_plan``)."""
    from .qsa.config import DeploymentConfig

    if isinstance(cfg, DeploymentConfig):
        from .qsa.planning import build_qsa_plan

        return build_qsa_plan(cfg, target, offline=offline, memo=memo)
    if memo is not None:  # a recording's
        return cfg.build_plan(target, offline=offline, memo=memo)
    return cfg.build_plan(target, offline=offline)


def unique_spec_id(ids: dict[str, int], spec_id: str) -> str:
    """``spec_id``, or ``spec_id.vN`` for its N-th use in one plan (same readable id, another
    specialization): stable, as points come in a stable order."""
    if spec_id in ids:
        ids[spec_id] += 1
        return f"{spec_id}.v{ids[spec_id]}"
    ids[spec_id] = 1
    return spec_id


def settle_for(source) -> None:
    """Make Triton's source hashes of ``source``'s kernels independent of hashing order before
    a compile (a recording's and a family's are settled when planned)."""
    from .qsa.config import DeploymentConfig

    if isinstance(source, DeploymentConfig):
        from .qsa.planning import settle_kernel_hashes

        settle_kernel_hashes()


# -- recordings -----------------------------------------------------------------------------------


def _recorded_kernels(recording, target: str, retarget: bool) -> list:
    """(request, JIT function) for each request; every entry that cannot be built here is
    named with its fix in one RecordingError."""
    from .recording import RecordingError

    found, problems, kernels = [], {}, {}
    for request in recording.requests:
        name = f"{request.module}.{request.qualname}"
        if request.target != target and not retarget:
            problems.setdefault(
                f"{name} was recorded on {request.target}",
                f"record on a {target} GPU, or pass --retarget to build it for {target}",
            )
            continue
        if name not in kernels:
            try:
                kernels[name] = tc.resolve_jit_function(request.module, request.qualname)
            except tc.KernelNotFound as exc:
                kernels[name] = None
                problems[name] = f"{exc.reason}; {exc.fix}"
        fn = kernels[name]
        if fn is None:
            continue
        if tc.source_hash(fn) != request.source_hash:
            problems.setdefault(
                name, "its source changed since it was recorded; record the run again"
            )
            continue
        found.append((request, fn))
    if problems:
        raise RecordingError(recording.name, list(problems.items()))
    return found


def _settle_modules_of(fns) -> None:
    """Settle the hashes of every JIT function of the modules that define ``fns``, helpers
    included (see settle_kernel_hashes): the hashes a build writes are the ones a server
    computes."""
    modules = {sys.modules[fn.module] for fn in fns if fn.module in sys.modules}
    found = [v for m in modules for v in vars(m).values() if tc.is_jit_function(v)]
    tc.settle_kernel_hashes(list({id(f): f for f in found}.values()))


def recording_plan(
    recording,
    target: str,
    *,
    offline: bool = True,
    retarget: bool = False,
    memo: list | None = None,
) -> Plan:
    """The plan of a recording on ``target``: one spec per recorded request (Triton's key and
    specialization as recorded, the compile hash computed here, under this toolchain).

    ``memo``: this plan's :meth:`Plan.to_memo` from an earlier start with the same recording,
    target, toolchain and planner (``Recording.plan_digest``). Every kernel is still resolved
    and its source compared with the recorded one; the memo stands for the compile hashes
    (a third of a warm start of a 1,000-kernel recording). A memo that does not match the
    requests raises ValueError."""
    from .recording import RecordedLaunch

    arch = tc.parse_target(target).arch
    found = _recorded_kernels(recording, target, retarget)
    if memo is not None:
        _settle_modules_of([fn for _, fn in found])
        return Plan(recording, target, _specs_from_memo(found, memo, RecordedLaunch))
    if retarget and any(r.target != target for r, _ in found):
        log.warning(
            "building requests recorded on %s for %s: the code's own launch choices (block "
            "sizes, warps) may differ on a %s GPU, so a server there may still compile",
            ", ".join(recording.targets),
            target,
            target,
        )
    _settle_modules_of([fn for _, fn in found])
    specs = []
    with tc.active_driver(tc.GPUTarget("cuda", arch, 32) if offline else None):
        for request, fn in found:
            data = tc.localized_specialization(request.specialization)
            if request.target != target:
                data = tc.retarget_specialization(data, tc.parse_target(request.target).arch, arch)
            digest = hashlib.sha256(request.key.encode()).hexdigest()[:10]
            specs.append(
                PlannedSpec(
                    f"{request.qualname}.{digest}",
                    "recorded",
                    request.qualname,
                    RecordedLaunch(fn, data),
                    request.key,
                    f"{request.module}, recorded on {request.target}"
                    + (" (autotuning)" if request.autotuned else ""),
                    (),
                    tc.recorded_compile_hash(fn, data),
                    data,
                )
            )
    return Plan(recording, target, specs)


def _specs_from_memo(found: list, memo: list, launch_class) -> list[PlannedSpec]:
    if len(memo) != len(found):
        raise ValueError(f"{len(memo)} memoized specs for {len(found)} requests")
    specs = []
    for (request, fn), m in zip(found, memo):
        if m["kernel"] != request.qualname or m["key"] != request.key:
            raise ValueError(f"memo entry {m['id']} is not {request.qualname} {request.key}")
        specs.append(
            PlannedSpec(
                m["id"],
                "recorded",
                request.qualname,
                launch_class(fn, m["specialization"]),
                request.key,
                m["detail"],
                (),
                m["compile_hash"],
                m["specialization"],
            )
        )
    return specs


# -- families ------------------------------------------------------------------------------------


def family_plan(dep, target: str, *, offline: bool = True) -> Plan:
    """The plan of a family deployment on ``target``: every point's launch bound by Triton's
    binder under the target's driver, one spec per distinct (kernel, key)."""
    from .errors import ConfigError

    family, config = dep.family, dep.config
    arch = tc.parse_target(target).arch
    specs: list[PlannedSpec] = []
    seen: set = set()
    ids: dict[str, int] = {}
    with tc.active_driver(tc.GPUTarget("cuda", arch, 32) if offline else None):
        launches = [
            (p, family.launch_for(config, p.value, arch)) for p in family.points(config, arch)
        ]
        for point, launch in launches:
            if not tc.is_jit_function(launch.kernel):
                raise ConfigError(
                    "family",
                    f"{family.name}: {point.id} launches {launch.kernel!r}, not a compiled "
                    "Triton JIT function (is TRITON_INTERPRET set?)",
                )
        _settle_modules_of([launch.kernel for _, launch in launches])
        for point, launch in launches:
            bound = tc.bind_launch(launch)
            if (bound.kernel, bound.key) in seen:
                continue
            seen.add((bound.kernel, bound.key))
            specs.append(
                PlannedSpec(
                    unique_spec_id(ids, point.id),
                    family.name,
                    bound.kernel,
                    launch,
                    bound.key,
                    point.detail,
                    tuple(point.value),
                    bound.compile_hash,
                    bound.specialization,
                )
            )
    return Plan(dep, target, specs)
