"""The QSA kernels' planning: every specialization the ``kernels`` launchers can reach for a
deployment.

The planner walks the runtime envelope (decode query lengths x request counts, prefill logits
widths, position dtypes), asks ``kernels``' own dispatch functions and launch builders what
each point would launch, and keeps one spec per distinct Triton cache key. Keys come from
Triton's binder under the target's driver (``triton_compat.capture_requests``), so two points
that compile to the same variant are one spec, and a variant that differs only in an argument
specialization (alignment, divisibility) is its own.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import torch

import kernels
from kernels import TensorMeta, limits

from .. import triton_compat as tc
from ..planner import Plan, PlannedSpec, unique_spec_id
from .config import DeploymentConfig

__all__ = [
    "build_qsa_plan",
    "launch_for",
    "settle_kernel_hashes",
    "kernel_functions",
    "torch_dtype",
    "short_dtype",
]


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def short_dtype(name: str) -> str:
    return limits.SHORT_DTYPE_NAMES[name]


def _i32(*shape, misalign=0):
    return TensorMeta(shape, torch.int32, misalign=misalign)


def launch_for(
    cfg: DeploymentConfig, family: str, point: tuple, arch: int | None = None
) -> kernels.KernelLaunch:
    """The launch ``kernels`` builds at one point of the envelope (serializable ``point``) on
    a GPU of compute capability ``arch``."""
    if family == "decode":
        dtype_name, dql, num_reqs = point
        dtype, rows = torch_dtype(dtype_name), num_reqs * dql
        return kernels.decode_scores_launch(
            TensorMeta((rows, cfg.num_heads, cfg.head_dim), dtype),
            TensorMeta((1, cfg.page_size, 1, cfg.head_dim), dtype),
            _i32(num_reqs, cfg.page_table_width, misalign=4),
            _i32(rows, misalign=4),
            TensorMeta((rows, cfg.num_columns), torch.float32),
            dql,
        )
    if family == "prefill":
        (dtype_name,) = point
        dtype, rows = torch_dtype(dtype_name), cfg.max_num_batched_tokens
        width, stride, _ = kernels.prefill_logits_layout(
            cfg.num_columns * cfg.compress_ratio,
            cfg.compress_ratio,
            cfg.num_columns,
            cfg.max_logits_mb,
        )
        return kernels.prefill_scores_launch(
            TensorMeta((rows, cfg.num_heads, cfg.head_dim), dtype),
            TensorMeta((1, cfg.page_size, 1, cfg.head_dim), dtype),
            _i32(2, cfg.page_table_width, misalign=4),
            _i32(3, misalign=4),
            _i32(rows, misalign=4),
            TensorMeta((rows, width), torch.float32, stride=(stride, 1)),
            rows,
            0,
            rows,
            width,
            arch=arch,
        )
    if family == "topk":
        width, stride, rows, index = point  # index: which of the top-k's launches
        k = cfg.block_topk
        with kernels.assume_arch(arch):  # its launch choices depend on the GPU
            return kernels.ragged_topk_launches(
                TensorMeta((rows, width), torch.float32, stride=(stride, 1)),
                _i32(rows, misalign=4),
                k,
                _i32(rows, k, misalign=4),
            )[index]
    if family == "expand":
        (pos_name,) = point
        return kernels.expand_launch(
            _i32(2, cfg.block_topk, misalign=4),
            TensorMeta((2,), torch_dtype(pos_name), misalign=4),
            _i32(2, misalign=4),
            cfg.compress_ratio,
            cfg.token_topk,
            _i32(2, cfg.token_topk + cfg.compress_ratio, misalign=4),
        )
    raise ValueError(f"unknown kernel family {family!r}")


def _decode_points(cfg: DeploymentConfig, arch: int):
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        for dql in range(1, cfg.max_decode_query_len + 1):
            max_reqs = min(cfg.max_num_reqs, cfg.max_num_batched_tokens // dql)
            seen = set()
            for num_reqs in range(1, max_reqs + 1):
                c = kernels.decode_launch_config(
                    dtype, cfg.num_heads, cfg.head_dim, dql, num_reqs, cfg.num_columns
                )
                if c not in seen:
                    seen.add(c)
                    yield (
                        "decode",
                        f"decode.{short_dtype(dtype_name)}.dql{dql}.qg{c.query_group}"
                        f".n{c.block_n}.s{c.num_stages}.tpp{c.tiles_per_program}.w{c.num_warps}",
                        (dtype_name, dql, num_reqs),
                        f"first reached at {num_reqs} requests",
                    )


def _prefill_points(cfg: DeploymentConfig, arch: int):
    for dtype_name in cfg.cache_dtypes:
        c = kernels.prefill_launch_config(
            torch_dtype(dtype_name), cfg.num_heads, cfg.head_dim, arch
        )
        yield (
            "prefill",
            f"prefill.{short_dtype(dtype_name)}.tr{c.tile_r}.w{c.num_warps}",
            (dtype_name,),
            "row counts, chunk offsets and widths are runtime values",
        )


def _topk_spec_id(launch) -> str:
    """A top-k launch's spec id: its path and what its launch choices fix."""
    o, name = launch.options, launch.kernel_name
    if name.startswith("_split_"):
        part = name.removeprefix("_split_").removesuffix("_kernel")
        lists = f".n{o['CANDIDATES']}" if "CANDIDATES" in o else ""
        scan_only = ".scan" if o.get("FINISH") is False else ""  # rows finished apart
        # a programmatic dependent launch of the launch before it (Hopper on)
        pdl = ".pdl" if o.get("launch_pdl") else ""
        return f"topk.split.{part}.c{o['CHUNK']}{lists}.w{o['num_warps']}{scan_only}{pdl}"
    if name == "_coop_topk_kernel":
        return f"topk.coop.c{o['CHUNK']}.n{o['CANDIDATES']}.w{o['num_warps']}"
    if name == "_listed_topk_kernel":
        return f"topk.listed.b{o['BLOCK']}.a{o['APPEND']}.n{o['CANDIDATES']}.w{o['num_warps']}"
    path = "single" if o["SINGLE"] else "streaming"
    return f"topk.{path}.b{o['BLOCK']}.w{o['num_warps']}"


def _topk_points(cfg: DeploymentConfig, arch: int):
    # Decode scores the full table width (row stride = width). Prefill scores widths in steps of
    # 64 up to it, with row strides that are multiples of 64 (kernels.prefill_logits_layout's
    # contract), so one prefill layout per top-k launch config stands for all of its widths.
    # Row counts reach other variants of a width's launches when a call can have as many rows
    # as a threshold of kernels.topk_row_thresholds (decode: requests x query length; prefill: a
    # chunk's rows).
    # Every launch of a top-k is a point (the split path makes two or three).
    k = cfg.block_topk
    seen = set()

    def launches(width, stride, max_rows, detail):
        for rows in sorted({1, *(min(max_rows, t) for t in kernels.topk_row_thresholds(width, k))}):
            c = kernels.topk_launch_config(width, k, rows, arch)
            if c in seen:
                continue
            seen.add(c)
            count = len(
                kernels.ragged_topk_launches(
                    TensorMeta((rows, width), torch.float32, stride=(stride, 1)),
                    _i32(rows),
                    k,
                    _i32(rows, k),
                )
            )
            for index in range(count):
                yield ("topk", None, (width, stride, rows, index), f"{detail}, {rows}+ rows")

    decode_rows = min(cfg.max_num_reqs * cfg.max_decode_query_len, cfg.max_num_batched_tokens)
    yield from launches(cfg.num_columns, cfg.num_columns, decode_rows, "decode layout")
    # the decode layout's stride differs from prefill's: its launches are other variants
    seen.clear()
    for seq_len in range(
        1, cfg.num_columns * cfg.compress_ratio + 64 * cfg.compress_ratio, 64 * cfg.compress_ratio
    ):
        width, stride, rows_per_chunk = kernels.prefill_logits_layout(
            min(seq_len, cfg.num_columns * cfg.compress_ratio),
            cfg.compress_ratio,
            cfg.num_columns,
            cfg.max_logits_mb,
        )
        yield from launches(
            width,
            stride,
            min(rows_per_chunk, cfg.max_num_batched_tokens),
            f"prefill widths from {width}",
        )


def _expand_points(cfg: DeploymentConfig, arch: int):
    for pos_name in cfg.position_dtypes:
        yield ("expand", f"expand.{short_dtype(pos_name)}", (pos_name,), "")


def kernel_functions() -> list:
    """Every JIT function of the ``kernels`` package, helpers included (its modules are
    imported here: the package loads them on first use)."""
    for info in pkgutil.iter_modules(kernels.__path__):
        importlib.import_module(f"kernels.{info.name}")
    fns = [
        v
        for name, mod in sorted(sys.modules.items())
        if name == "kernels" or name.startswith("kernels.")
        for v in vars(mod).values()
        if tc.is_jit_function(v)
    ]
    return list({id(f): f for f in fns}.values())


def settle_kernel_hashes() -> None:
    """Triton's source hashes of every JIT function in ``kernels``, made independent of the order
    this process hashes them in (see triton_compat.settle_kernel_hashes); before any compile
    hash is computed or a kernel compiled."""
    tc.settle_kernel_hashes(kernel_functions())


def build_qsa_plan(
    cfg: DeploymentConfig,
    target: str | None = None,
    *,
    offline: bool = True,
    memo: list | None = None,
) -> Plan:
    """The plan for ``cfg`` on ``target`` (default: the config's). Needs compiled-mode Triton.

    ``offline=False`` binds under the real driver (a serving process on that target's GPU), so
    Triton's per-device binder state is the real device's. ``memo`` is a plan's
    :meth:`Plan.to_memo` from the same config, target, toolchain and :func:`kernels_digest`:
    it skips the envelope walk and the binder probes."""
    target_name = target or cfg.target
    arch = tc.parse_target(target_name).arch
    if memo is not None:
        specs = [
            PlannedSpec(
                m["id"],
                m["family"],
                m["kernel"],
                launch_for(cfg, m["family"], tuple(m["point"]), arch),
                m["key"],
                m["detail"],
                tuple(m["point"]),
                m["compile_hash"],
                m["specialization"],
            )
            for m in memo
        ]
        return Plan(cfg, target_name, specs)
    gpu_target = tc.GPUTarget("cuda", arch, 32) if offline else None
    settle_kernel_hashes()
    specs: list[PlannedSpec] = []
    seen: dict[tuple[str, str], PlannedSpec] = {}
    ids: dict[str, int] = {}
    with tc.active_driver(gpu_target):
        for points in (_decode_points, _prefill_points, _topk_points, _expand_points):
            for family, spec_id, point, detail in points(cfg, arch):
                launch = launch_for(cfg, family, point, arch)
                if not tc.is_jit_function(launch.kernel):
                    raise RuntimeError(
                        "kernels were imported under TRITON_INTERPRET=1; "
                        "warmup needs compiled kernels"
                    )
                if spec_id is None:  # top-k: named by the launch it makes
                    spec_id = _topk_spec_id(launch)
                bound = tc.bind_launch(launch)
                kernel, key = bound.kernel, bound.key
                if (kernel, key) in seen:
                    continue
                spec_id = unique_spec_id(ids, spec_id)
                spec = PlannedSpec(
                    spec_id,
                    family,
                    kernel,
                    launch,
                    key,
                    detail,
                    point,
                    bound.compile_hash,
                    bound.specialization,
                )
                seen[(kernel, key)] = spec
                specs.append(spec)
    return Plan(cfg, target_name, specs)
