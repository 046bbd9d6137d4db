"""The QSA kernels as a family (``--family qsa``, entry point ``qsa``): its config is the
deployment config, its points and launches are the planner's. A QSA deployment plans, builds and
caches exactly as ``--config`` does (the same manifests), with its richer spec naming."""

from __future__ import annotations

from ..families import Family, Point
from .config import DeploymentConfig

__all__ = ["QSAFamily"]


class QSAFamily(Family):
    name = "qsa"

    def config_from_dict(self, data: dict) -> DeploymentConfig:
        return DeploymentConfig.from_dict(data)

    def config_to_dict(self, config: DeploymentConfig) -> dict:
        return config.to_dict()

    def default_target(self, config: DeploymentConfig) -> str:
        return config.target

    def as_plan_source(self, config: DeploymentConfig) -> DeploymentConfig:
        return config  # planned by planner.build_plan, keyed as --config keys it

    def points(self, config: DeploymentConfig, arch: int):
        from . import planning as planner

        for points in (
            planner._decode_points,
            planner._prefill_points,
            planner._topk_points,
            planner._expand_points,
        ):
            for part, spec_id, point, detail in points(config, arch):
                yield Point(spec_id or part, (part, *point), detail)

    def launch_for(self, config: DeploymentConfig, value: tuple, arch: int):
        from .planning import launch_for

        return launch_for(config, value[0], tuple(value[1:]), arch)

    def sweep(self, config: DeploymentConfig, seed: int) -> int:
        from .trace import sweep_envelope

        calls = 0

        def run(fn, *args, **kwargs):
            nonlocal calls
            calls += 1
            fn(*args, **kwargs)

        sweep_envelope(config, run, seed=seed)
        return calls
