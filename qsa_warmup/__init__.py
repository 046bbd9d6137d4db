"""qsa-warmup: plan, prebuild, check and load every QSA kernel specialization ahead of serving.

Attributes are imported on first use, so ``python -m qsa_warmup`` can configure Triton before
the kernels are defined.
"""

from __future__ import annotations

import importlib

__all__ = [
    "DeploymentConfig",
    "load_config",
    "PRESETS",
    "build_plan",
    "Plan",
    "PlannedSpec",
    "BoundCache",
    "CacheFolder",
    "Lookup",
    "prebuild",
    "check_plan",
    "BuildReport",
    "trace_envelope",
    "warmup",
    "WarmupReport",
    "set_strict_mode",
    "ConfigError",
    "CacheError",
    "StrictModeError",
    "WarmupUnavailable",
]

_WHERE = {
    "DeploymentConfig": "qsa.config",
    "load_config": "qsa.config",
    "PRESETS": "qsa.config",
    "build_plan": "planner",
    "Plan": "planner",
    "PlannedSpec": "planner",
    "BoundCache": "cache",
    "CacheFolder": "cache",
    "Lookup": "cache",
    "set_strict_mode": "strict",
    "prebuild": "engine",
    "check_plan": "engine",
    "BuildReport": "engine",
    "trace_envelope": "qsa.trace",
    "warmup": "hook",
    "WarmupReport": "hook",
    "ConfigError": "errors",
    "CacheError": "errors",
    "StrictModeError": "errors",
    "WarmupUnavailable": "errors",
}


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module 'qsa_warmup' has no attribute {name!r}")
