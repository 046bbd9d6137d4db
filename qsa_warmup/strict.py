"""Strict no-JIT mode: what a Triton compile does once warmup has run.

Scope ``planned`` (the default) covers every kernel of a package a warmed plan or recording
drew from (``kernels`` for a QSA deployment, ``liger_kernel`` for a recording of Liger's ops):
a variant or a kernel of that package that was not planned is flagged. ``all`` covers any
Triton compile in the process.

The planned variants of every warmup in the process are kept (a process may serve several
deployments: two models, a draft and a target), so the closest planned variant named in an
error comes from all of them. Compiles made by a warmup itself, in the thread running it, are
never flagged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Iterator

from . import knobs
from . import triton_compat as tc
from .errors import ConfigError, StrictModeError

__all__ = [
    "set_strict_mode",
    "strict_mode",
    "strict_scope",
    "register_plan",
    "warming",
    "warming_here",
    "closest_planned",
]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_state = {"mode": "off", "scope": "planned"}
_planned: dict[str, dict[str, object]] = {}  # kernel -> spec id -> launch (for closest_planned)
_planned_packages: set[str] = set()  # top-level packages of every warmed spec's kernel
_local = threading.local()


def set_strict_mode(mode: str, scope: str | None = None) -> None:
    """off | warn | error: what a compile in ``scope`` (planned | all; default: unchanged)
    does after warmup."""
    if mode not in knobs.STRICT_MODES:
        raise ConfigError("strict", f"must be one of {', '.join(knobs.STRICT_MODES)}, got {mode!r}")
    if scope is not None and scope not in knobs.STRICT_SCOPES:
        raise ConfigError(
            "strict_scope", f"must be one of {', '.join(knobs.STRICT_SCOPES)}, got {scope!r}"
        )
    with _lock:
        _state["mode"] = mode
        if scope is not None:
            _state["scope"] = scope
        tc.install_jit_cache_hook(_on_compile_request)  # once; chained behind hooks before it


def strict_mode() -> str:
    return _state["mode"]


def strict_scope() -> str:
    return _state["scope"]


def register_plan(plan) -> None:
    """Add a warmed plan's variants to the process's union."""
    with _lock:
        for spec in plan.specs:  # the launches' options are decoded only if a refusal asks
            _planned_packages.add(spec.launch.kernel.module.split(".")[0])
            _planned.setdefault(spec.kernel, {})[spec.id] = spec.launch


def _constants_and_warps(launch) -> tuple[dict, int]:
    consts = {k: v for k, v in launch.options.items() if k not in ("num_warps", "num_stages")}
    return json.loads(json.dumps(consts, default=str)), launch.options.get("num_warps", 4)


def warming_here() -> bool:
    """Whether this thread is inside a warmup."""
    return bool(getattr(_local, "depth", 0))


@contextlib.contextmanager
def warming() -> Iterator[None]:
    """Compiles in this thread are a warmup's own, not flagged."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth


def closest_planned(variant) -> str | None:
    """The planned spec of the same kernel with the fewest differing constants and warps."""
    planned = _planned.get(variant.kernel)
    if not planned:
        return None
    want = json.loads(variant.constants)

    def distance(item):
        consts, warps = _constants_and_warps(item[1])
        return sum(want.get(k) != v for k, v in consts.items()) + (warps != variant.num_warps)

    return min(planned.items(), key=distance)[0]


def _in_scope(variant, module: str) -> bool:
    return _state["scope"] == "all" or module.split(".")[0] in _planned_packages


def _on_compile_request(variant, module: str) -> bool:
    mode = _state["mode"]
    if mode == "off" or getattr(_local, "depth", 0) or not _in_scope(variant, module):
        return False
    text = f"{variant.kernel} num_warps={variant.num_warps} constants={variant.constants}"
    closest = closest_planned(variant)
    if mode == "error":
        raise StrictModeError(text, closest)
    log.warning("JIT compile after warmup: %s; closest planned: %s", text, closest)
    return False
