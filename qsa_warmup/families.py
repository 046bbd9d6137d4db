"""Kernel families: code that declares ahead of time every launch it can make, so qsa-warmup
plans, builds and proves it the way it does the QSA kernels.

A family names itself, reads its config from JSON (typed and validated: a ``ConfigError``
naming the field), lists the points of its envelope for a config and a GPU target, and builds
the launch each point makes with its own launch builders and dispatch functions. It may also
run its launchers over a random sweep of the envelope on CPU tensors (``sweep``), which
``check --trace`` records under the offline driver and holds against the plan.

Families are found by name through the ``qsa_warmup.families`` entry-point group, or by import
path (``package.module:attribute``); :func:`register_family` adds one in-process. A deployment
of a family (:class:`FamilyDeployment`) is a plan source like a QSA config or a recording:
plan, prebuild, check, explain, export, import, the shared tier, gc, stats and strict mode take
it (``--family NAME --config FILE`` on the command line).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from . import triton_compat as tc
from .errors import ConfigError

__all__ = [
    "Family",
    "FamilyDeployment",
    "Launch",
    "Point",
    "register_family",
    "find_family",
    "deployment",
    "trace_family",
    "held_against",
    "TraceResult",
    "ENTRY_POINT_GROUP",
]

ENTRY_POINT_GROUP = "qsa_warmup.families"


@dataclass
class Launch:
    """One launch a point makes: the JIT function, its grid, its positional arguments (tensors
    or anything with ``data_ptr()``, ``dtype`` for pointer arguments, and plain values) and its
    keyword options (constexprs, ``num_warps``, ``num_stages``)."""

    kernel: Any
    grid: tuple
    args: tuple
    options: dict = field(default_factory=dict)

    def warmup(self):
        """Compile for the active driver's target without launching (Triton's own binder)."""
        return self.kernel.warmup(*self.args, grid=self.grid, **self.options)

    @property
    def kernel_name(self) -> str:
        return self.kernel.fn.__name__


@dataclass
class TraceResult:
    """What a traced sweep asked Triton for, against a plan."""

    launches: int
    requested: int  # distinct (kernel, key) pairs
    unplanned: list = field(default_factory=list)  # RequestedVariant not in the plan
    covered: set = field(default_factory=set)  # planned spec ids that the sweep reached


@dataclass(frozen=True)
class Point:
    """A point of a family's envelope: a readable spec id, a JSON-serializable value the
    family's ``launch_for`` rebuilds the launch from, and a note for ``plan``."""

    id: str
    value: tuple
    detail: str = ""


class Family:
    """Subclass and override the methods that raise; ``name`` is the family's registry name."""

    name: str = ""

    def config_from_dict(self, data: dict) -> Any:
        """The typed, validated config; a ConfigError naming the field for bad input."""
        raise NotImplementedError

    def config_to_dict(self, config) -> dict:
        raise NotImplementedError

    def default_target(self, config) -> str:
        return "sm_90"

    def points(self, config, arch: int) -> Iterable[Point]:
        """Every point of the envelope for this config on compute capability ``arch``."""
        raise NotImplementedError

    def launch_for(self, config, value: tuple, arch: int) -> Launch:
        """The launch the family's own launch builders make at a point."""
        raise NotImplementedError

    def sweep(self, config, seed: int) -> int:
        """Run the launchers over a random sweep of the envelope on CPU tensors (nothing is
        launched: ``check --trace`` answers every compile request); the launcher calls made.
        Families that cannot run on CPU tensors leave it: ``check --trace`` then says so."""
        raise NotImplementedError


_registry: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Make ``family`` findable by its name in this process (returns it: usable as a
    decorator on an instance-returning factory's result)."""
    if not isinstance(family, Family) or not family.name:
        raise ConfigError("family", "a Family instance with a name is expected")
    _registry[family.name] = family
    return family


def find_family(name: str) -> Family:
    """A family by registry name, entry-point name (group ``qsa_warmup.families``) or import
    path ``module:attribute`` (an instance, or a Family subclass taking no arguments)."""
    if name in _registry:
        return _registry[name]
    target = None
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            target = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError("family", f"cannot load {name}: {exc}") from None
    else:
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            known = sorted(
                set(_registry) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
            )
            raise ConfigError(
                "family",
                f"no family named {name!r} (known: {', '.join(known) or 'none'}); give "
                "module:attribute, or install the package that registers it",
            )
        target = found[0].load()
    family = target() if isinstance(target, type) and issubclass(target, Family) else target
    if not isinstance(family, Family):
        raise ConfigError("family", f"{name} is not a qsa_warmup.families.Family")
    _registry.setdefault(family.name, family)
    return family


class FamilyDeployment:
    """One (family, config) pair: a plan source."""

    def __init__(self, family: Family, config):
        self.family, self.config = family, config

    @property
    def target(self) -> str:
        return self.family.default_target(self.config)

    def to_dict(self) -> dict:
        """Name and config; ``family_class`` finds the family again in a process where its name
        is not registered (a bundle's import, a build child)."""
        kind = type(self.family)
        return {
            "family": self.family.name,
            "config": self.family.config_to_dict(self.config),
            "family_class": f"{kind.__module__}:{kind.__qualname__}",
        }

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "config") -> "FamilyDeployment":
        if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
            raise ConfigError(source, "a family deployment needs 'family' and 'config'")
        try:
            family = find_family(str(data.get("family")))
        except ConfigError:
            if not isinstance(data.get("family_class"), str):
                raise
            family = find_family(data["family_class"])
        return cls(family, family.config_from_dict(data["config"]))

    def geometry_hash(self) -> str:
        identity = {"family": self.family.name, "config": self.to_dict()["config"]}
        text = json.dumps(identity, sort_keys=True)
        return "fam" + hashlib.sha256(text.encode()).hexdigest()[:13]

    def check_target(self, target: str, field: str = "target") -> None:
        try:
            tc.parse_target(target)
        except ValueError as exc:
            raise ConfigError(field, str(exc)) from None

    def build_plan(self, target: str | None = None, *, offline: bool = True):
        from .planner import family_plan

        return family_plan(self, target or self.target, offline=offline)


def deployment(family: str | Family, config: dict | Any) -> FamilyDeployment:
    """A deployment of ``family`` (a name, import path or instance) with ``config`` (a dict,
    validated by the family, or its typed config)."""
    fam = family if isinstance(family, Family) else find_family(family)
    cfg = fam.config_from_dict(config) if isinstance(config, dict) else config
    own = getattr(fam, "as_plan_source", None)  # a family planned by its own planner (QSA)
    return own(cfg) if own else FamilyDeployment(fam, cfg)


def trace_family(dep: FamilyDeployment, plan, *, seed: int = 0):
    """``check --trace`` for a family: its sweep on CPU tensors under the plan's target, every
    compile request recorded and refused, held against the plan."""
    target = tc.parse_target(plan.target)
    with tc.active_driver(target), tc.capture_requests(block=True) as seen:
        try:
            launches = dep.family.sweep(dep.config, seed)
        except NotImplementedError:
            raise ConfigError(
                "--trace", f"family {dep.family.name} has no sweep to trace; check without --trace"
            ) from None
    return held_against(plan, seen, launches)


def held_against(plan, requested, launches: int) -> TraceResult:
    """A traced sweep's compile requests (``RequestedVariant``s) against ``plan``: the distinct
    ones, those the plan lacks, and the planned specs they reached."""
    planned = plan.by_request()
    distinct = {(v.kernel, v.key): v for v in requested}
    result = TraceResult(launches=launches, requested=len(distinct))
    for pair, variant in distinct.items():
        spec = planned.get(pair)
        if spec is None:
            result.unplanned.append(variant)
        else:
            result.covered.add(spec.id)
    return result
