"""Every specialization the ``kernels`` launchers can reach for a deployment.

The planner walks the runtime envelope (decode query lengths x request counts, prefill logits
widths, position dtypes), asks ``kernels``' own dispatch functions and launch builders what
each point would launch, and keeps one spec per distinct Triton cache key. Keys come from
Triton's binder under the target's driver (``triton_compat.capture_requests``), so two points
that compile to the same variant are one spec, and a variant that differs only in an argument
specialization (alignment, divisibility) is its own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

import kernels
from kernels import TensorMeta

from . import triton_compat as tc
from .config import DeploymentConfig

__all__ = ["PlannedSpec", "Plan", "build_plan", "torch_dtype", "short_dtype"]

_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn, "int32": torch.int32,
                 "int64": torch.int64}
_SHORT = {"bfloat16": "bf16", "float8_e4m3fn": "fp8", "int32": "i32", "int64": "i64"}


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_DTYPES[name]


def short_dtype(name: str) -> str:
    return _SHORT[name]


@dataclass
class PlannedSpec:
    id: str
    family: str  # decode | prefill | topk | expand
    kernel: str
    launch: kernels.KernelLaunch
    key: str = ""  # Triton's in-memory cache key for this launch on the target
    detail: str = ""

    @property
    def key_digest(self) -> str:
        return hashlib.sha256(f"{self.kernel}|{self.key}".encode()).hexdigest()[:16]


@dataclass
class Plan:
    config: DeploymentConfig
    target: str
    specs: list[PlannedSpec]

    def by_id(self) -> dict[str, PlannedSpec]:
        return {s.id: s for s in self.specs}

    def by_request(self) -> dict[tuple[str, str], PlannedSpec]:
        return {(s.kernel, s.key): s for s in self.specs}


def _i32(*shape, misalign=0):
    return TensorMeta(shape, torch.int32, misalign=misalign)


def _decode_points(cfg: DeploymentConfig):
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        for dql in range(1, cfg.max_decode_query_len + 1):
            max_reqs = min(cfg.max_num_reqs, cfg.max_num_batched_tokens // dql)
            seen = set()
            for num_reqs in range(1, max_reqs + 1):
                launch_cfg = kernels.decode_launch_config(dtype, cfg.num_heads, cfg.head_dim, dql, num_reqs,
                                                          cfg.num_columns)
                if launch_cfg in seen:
                    continue
                seen.add(launch_cfg)
                rows = num_reqs * dql
                launch = kernels.decode_scores_launch(
                    TensorMeta((rows, cfg.num_heads, cfg.head_dim), dtype),
                    TensorMeta((1, cfg.page_size, 1, cfg.head_dim), dtype),
                    _i32(num_reqs, cfg.page_table_width, misalign=4), _i32(rows, misalign=4),
                    TensorMeta((rows, cfg.num_columns), torch.float32), dql)
                c = launch_cfg
                yield ("decode", f"decode.{short_dtype(dtype_name)}.dql{dql}.qg{c.query_group}.tpp{c.tiles_per_program}"
                       f".w{c.num_warps}", launch, f"first reached at {num_reqs} requests")


def _prefill_points(cfg: DeploymentConfig):
    rows = cfg.max_num_batched_tokens
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        width, stride, _ = kernels.prefill_logits_layout(cfg.num_columns * cfg.compress_ratio, cfg.compress_ratio,
                                                         cfg.num_columns, cfg.max_logits_mb)
        launch = kernels.prefill_scores_launch(
            TensorMeta((rows, cfg.num_heads, cfg.head_dim), dtype),
            TensorMeta((1, cfg.page_size, 1, cfg.head_dim), dtype),
            _i32(2, cfg.page_table_width, misalign=4), _i32(3, misalign=4), _i32(rows, misalign=4),
            TensorMeta((rows, width), torch.float32, stride=(stride, 1)), rows, 0, rows, width)
        c = kernels.prefill_launch_config(dtype, cfg.num_heads, cfg.head_dim)
        yield ("prefill", f"prefill.{short_dtype(dtype_name)}.tr{c.tile_r}.w{c.num_warps}", launch,
               "row counts, chunk offsets and widths are runtime values")


def _topk_points(cfg: DeploymentConfig):
    # Decode scores the full table width; prefill scores widths that are multiples of 64
    # (kernels.prefill_logits_layout) up to it. Each width is asked of the dispatch function.
    layouts = {(cfg.num_columns, cfg.num_columns)}
    for seq_len in range(1, cfg.num_columns * cfg.compress_ratio + 1, 64 * cfg.compress_ratio):
        width, stride, _ = kernels.prefill_logits_layout(seq_len, cfg.compress_ratio, cfg.num_columns,
                                                         cfg.max_logits_mb)
        layouts.add((width, stride))
    width, stride, _ = kernels.prefill_logits_layout(cfg.num_columns * cfg.compress_ratio, cfg.compress_ratio,
                                                     cfg.num_columns, cfg.max_logits_mb)
    layouts.add((width, stride))
    k = cfg.block_topk
    for width, stride in sorted(layouts):
        launch = kernels.ragged_topk_launch(TensorMeta((2, width), torch.float32, stride=(stride, 1)),
                                            _i32(2, misalign=4), k, _i32(2, k, misalign=4))
        c = kernels.topk_launch_config(width)
        yield ("topk", f"topk.{c.path}.b{c.block}.w{c.num_warps}", launch, f"width {width}, row stride {stride}")


def _expand_points(cfg: DeploymentConfig):
    for pos_name in cfg.position_dtypes:
        launch = kernels.expand_launch(
            _i32(2, cfg.block_topk, misalign=4), TensorMeta((2,), torch_dtype(pos_name), misalign=4),
            _i32(2, misalign=4), cfg.compress_ratio, cfg.token_topk,
            _i32(2, cfg.token_topk + cfg.compress_ratio, misalign=4))
        yield ("expand", f"expand.{short_dtype(pos_name)}", launch, "")


def request_key(launch: kernels.KernelLaunch) -> tuple[str, str]:
    """(kernel name, Triton cache key) that this launch requests on the active driver."""
    with tc.capture_requests(block=True) as seen:
        launch.warmup()
    if len(seen) != 1:
        raise RuntimeError(f"{launch.kernel_name}: expected one compile request, saw {len(seen)} "
                           "(was it already compiled in this process?)")
    return seen[0].kernel, seen[0].key


def build_plan(cfg: DeploymentConfig, target: str | None = None) -> Plan:
    """The plan for ``cfg`` on ``target`` (default: the config's). Needs compiled-mode Triton."""
    target_name = target or cfg.target
    gpu_target = tc.parse_target(target_name)
    specs: list[PlannedSpec] = []
    seen: dict[tuple[str, str], PlannedSpec] = {}
    ids: dict[str, int] = {}
    with tc.active_driver(gpu_target):
        for points in (_decode_points, _prefill_points, _topk_points, _expand_points):
            for family, spec_id, launch, detail in points(cfg):
                if not tc.is_jit_function(launch.kernel):
                    raise RuntimeError("kernels were imported under TRITON_INTERPRET=1; warmup needs compiled kernels")
                kernel, key = request_key(launch)
                if (kernel, key) in seen:
                    continue
                if spec_id in ids:  # same readable id, different specialization: disambiguate stably
                    ids[spec_id] += 1
                    spec_id = f"{spec_id}.v{ids[spec_id]}"
                else:
                    ids[spec_id] = 1
                spec = PlannedSpec(spec_id, family, kernel, launch, key, detail)
                seen[(kernel, key)] = spec
                specs.append(spec)
    return Plan(cfg, target_name, specs)
