"""The coverage proof: run the real launchers over a randomized sweep of the deployment's
envelope on CPU tensors, with every compile request recorded and refused (nothing compiles,
nothing launches), and compare what Triton's runtime asked for with the plan."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

import kernels

from . import triton_compat as tc
from .config import DeploymentConfig
from .planner import Plan, torch_dtype

__all__ = ["TraceResult", "trace_envelope"]


@dataclass
class TraceResult:
    launches: int
    requested: int  # distinct (kernel, key) pairs
    unplanned: list = field(default_factory=list)  # RequestedVariant not in the plan
    covered: set = field(default_factory=set)  # planned spec ids that the sweep reached


def _view(t: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """``t`` or an equal view into a larger buffer at an odd element offset."""
    if rng.random() < 0.5:
        return t
    pad = rng.choice([1, 3])
    big = torch.empty((t.shape[0] + pad,) + tuple(t.shape[1:]), dtype=t.dtype)
    big[pad:] = t
    return big[pad:]


def _decode_sweep(cfg, rng, run):
    k = cfg.block_topk
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        k_cache = torch.empty(1, cfg.page_size, 1, cfg.head_dim, dtype=dtype)
        for dql in range(1, cfg.max_decode_query_len + 1):
            max_reqs = min(cfg.max_num_reqs, cfg.max_num_batched_tokens // dql)
            for num_reqs in rng.sample(range(1, max_reqs + 1), max_reqs):  # every count, random order
                rows = num_reqs * dql
                q = torch.empty(rows, cfg.num_heads, cfg.head_dim, dtype=dtype)
                table = _view(torch.zeros(num_reqs, cfg.page_table_width, dtype=torch.int32), rng)
                visible = _view(torch.zeros(rows, dtype=torch.int32), rng)
                out = _view(torch.empty(rows, k, dtype=torch.int32), rng)
                run(kernels.qsa_select_paged_decode, q, k_cache, table, visible, cfg.token_topk, cfg.compress_ratio,
                    dql, out)


def _prefill_sweep(cfg, rng, run, samples):
    k = cfg.block_topk
    max_context = cfg.num_columns * cfg.compress_ratio
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        k_cache = torch.empty(1, cfg.page_size, 1, cfg.head_dim, dtype=dtype)
        for i in range(samples):
            num_reqs = rng.randint(1, max(1, min(cfg.max_num_reqs, 16)))
            tokens = rng.randint(num_reqs, max(num_reqs, cfg.max_num_batched_tokens))
            cuts = sorted(rng.sample(range(1, tokens), num_reqs - 1)) if num_reqs > 1 else []
            lens = [b - a for a, b in zip([0] + cuts, cuts + [tokens])]
            base = rng.choice([0, 0, 7, 1000])
            qsl = torch.tensor([base] + [base + x for x in torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
            # the smallest and largest contexts, then random ones, so every width bucket is reached
            max_seq_len = [1, max_context][i] if i < 2 else rng.randint(1, max_context)
            q = torch.empty(tokens, cfg.num_heads, cfg.head_dim, dtype=dtype)
            table = _view(torch.zeros(num_reqs, cfg.page_table_width, dtype=torch.int32), rng)
            visible = _view(torch.zeros(tokens, dtype=torch.int32), rng)
            out = _view(torch.empty(tokens, k, dtype=torch.int32), rng)
            run(kernels.qsa_select_paged_prefill, q, k_cache, table, _view(qsl, rng), visible, cfg.token_topk,
                cfg.compress_ratio, max(lens), out, max_seq_len, max_logits_mb=cfg.max_logits_mb)
        # every logits width the prefill path can score (one per 64 columns)
        for seq_len in range(1, max_context + 1, 64 * cfg.compress_ratio):
            q = torch.empty(1, cfg.num_heads, cfg.head_dim, dtype=dtype)
            run(kernels.qsa_select_paged_prefill, q, k_cache, torch.zeros(1, cfg.page_table_width, dtype=torch.int32),
                torch.tensor([0, 1], dtype=torch.int32), torch.zeros(1, dtype=torch.int32), cfg.token_topk,
                cfg.compress_ratio, 1, torch.empty(1, k, dtype=torch.int32), seq_len, max_logits_mb=cfg.max_logits_mb)


def _expand_sweep(cfg, rng, run, samples):
    k = cfg.block_topk
    for pos_name in cfg.position_dtypes:
        for _ in range(samples):
            rows = rng.randint(1, cfg.max_num_batched_tokens)
            run(kernels.expand_qsa_block_indices, _view(torch.zeros(rows, k, dtype=torch.int32), rng),
                _view(torch.zeros(rows, dtype=torch_dtype(pos_name)), rng),
                _view(torch.zeros(rows, dtype=torch.int32), rng), cfg.compress_ratio, cfg.token_topk,
                _view(torch.empty(rows, cfg.token_topk + cfg.compress_ratio, dtype=torch.int32), rng))


def trace_envelope(cfg: DeploymentConfig, plan: Plan, *, seed: int = 0, samples: int = 24) -> TraceResult:
    """Sweep the envelope under the plan's target; every request is refused and recorded."""
    rng = random.Random(seed)
    planned = plan.by_request()
    launches = 0

    def run(fn, *args, **kwargs):
        nonlocal launches
        launches += 1
        fn(*args, **kwargs)

    with tc.active_driver(tc.parse_target(plan.target)), tc.capture_requests(block=True) as seen:
        _decode_sweep(cfg, rng, run)
        _prefill_sweep(cfg, rng, run, samples)
        _expand_sweep(cfg, rng, run, max(2, samples // 4))
    distinct = {(v.kernel, v.key): v for v in seen}
    result = TraceResult(launches=launches, requested=len(distinct))
    for pair, variant in distinct.items():
        spec = planned.get(pair)
        if spec is None:
            result.unplanned.append(variant)
        else:
            result.covered.add(spec.id)
    return result
