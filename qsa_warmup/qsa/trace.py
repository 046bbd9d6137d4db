"""The coverage proof: run the real launchers over a randomized sweep of the deployment's
envelope on CPU tensors, with every compile request recorded and refused (nothing compiles,
nothing launches), and compare what Triton's runtime asked for with the plan."""

from __future__ import annotations

import random

import torch

import kernels

from .. import triton_compat as tc
from ..families import TraceResult, held_against
from ..planner import Plan
from .config import DeploymentConfig
from .planning import torch_dtype

__all__ = ["trace_envelope", "sweep_envelope", "Inputs"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _view(t: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """``t`` or an equal view into a larger buffer at an odd element offset."""
    if rng.random() < 0.5:
        return t
    pad = rng.choice([1, 3])
    big = torch.empty((t.shape[0] + pad,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    big[pad:] = t
    return big[pad:]


class Inputs:
    """Tensor factory of a sweep: empty CPU tensors for the trace, random valid data on a GPU."""

    def __init__(self, device="cpu", realistic=False, num_blocks=1, seed=0):
        self.device, self.realistic, self.num_blocks = device, realistic, num_blocks
        self.gen = torch.Generator(device=device).manual_seed(seed) if realistic else None

    def cache(self, cfg, dtype):
        shape = (self.num_blocks, cfg.page_size, 1, cfg.head_dim)
        if not self.realistic:
            return torch.empty(shape, dtype=dtype, device=self.device)
        return torch.randn(shape, generator=self.gen, device=self.device).to(dtype)

    def q(self, rows, cfg, dtype):
        shape = (rows, cfg.num_heads, cfg.head_dim)
        if not self.realistic:
            return torch.empty(shape, dtype=dtype, device=self.device)
        return torch.randn(shape, generator=self.gen, device=self.device).to(dtype)

    def ints(self, shape, high, dtype=torch.int32):
        if not self.realistic:
            return torch.zeros(shape, dtype=dtype, device=self.device)
        return torch.randint(
            0, max(high, 1), shape, generator=self.gen, device=self.device, dtype=dtype
        )

    def out(self, shape):
        return torch.empty(shape, dtype=torch.int32, device=self.device)


def _decode_sweep(cfg, rng, run, x: Inputs):
    k = cfg.block_topk
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        k_cache = x.cache(cfg, dtype)
        for dql in range(1, cfg.max_decode_query_len + 1):
            max_reqs = min(cfg.max_num_reqs, cfg.max_num_batched_tokens // dql)
            for num_reqs in rng.sample(
                range(1, max_reqs + 1), max_reqs
            ):  # every count, random order
                rows = num_reqs * dql
                q = x.q(rows, cfg, dtype)
                table = _view(x.ints((num_reqs, cfg.page_table_width), x.num_blocks), rng)
                visible = _view(x.ints((rows,), cfg.num_columns + 1), rng)
                out = _view(x.out((rows, k)), rng)
                run(
                    kernels.qsa_select_paged_decode,
                    q,
                    k_cache,
                    table,
                    visible,
                    cfg.token_topk,
                    cfg.compress_ratio,
                    dql,
                    out,
                )


def _prefill_sweep(cfg, rng, run, samples, x: Inputs):
    k = cfg.block_topk
    max_context = cfg.num_columns * cfg.compress_ratio
    for dtype_name in cfg.cache_dtypes:
        dtype = torch_dtype(dtype_name)
        k_cache = x.cache(cfg, dtype)
        for i in range(samples):
            num_reqs = rng.randint(1, max(1, min(cfg.max_num_reqs, 16)))
            tokens = rng.randint(num_reqs, max(num_reqs, cfg.max_num_batched_tokens))
            cuts = sorted(rng.sample(range(1, tokens), num_reqs - 1)) if num_reqs > 1 else []
            lens = [b - a for a, b in zip([0] + cuts, cuts + [tokens])]
            base = rng.choice([0, 0, 7, 1000])
            qsl = torch.tensor(
                [base] + [base + n for n in torch.tensor(lens).cumsum(0).tolist()],
                dtype=torch.int32,
                device=x.device,
            )
            # the smallest and largest contexts, then random ones, so every width bucket is reached
            max_seq_len = [1, max_context][i] if i < 2 else rng.randint(1, max_context)
            q = x.q(tokens, cfg, dtype)
            table = _view(x.ints((num_reqs, cfg.page_table_width), x.num_blocks), rng)
            visible = _view(x.ints((tokens,), _cdiv(max_seq_len, cfg.compress_ratio) + 1), rng)
            out = _view(x.out((tokens, k)), rng)
            run(
                kernels.qsa_select_paged_prefill,
                q,
                k_cache,
                table,
                _view(qsl, rng),
                visible,
                cfg.token_topk,
                cfg.compress_ratio,
                max(lens),
                out,
                max_seq_len,
                max_logits_mb=cfg.max_logits_mb,
            )
        # every logits width the prefill path can score (one per 64 columns)
        for seq_len in range(1, max_context + 1, 64 * cfg.compress_ratio):
            run(
                kernels.qsa_select_paged_prefill,
                x.q(1, cfg, dtype),
                k_cache,
                x.ints((1, cfg.page_table_width), x.num_blocks),
                torch.tensor([0, 1], dtype=torch.int32, device=x.device),
                x.ints((1,), _cdiv(seq_len, cfg.compress_ratio) + 1),
                cfg.token_topk,
                cfg.compress_ratio,
                1,
                x.out((1, k)),
                seq_len,
                max_logits_mb=cfg.max_logits_mb,
            )


def _expand_sweep(cfg, rng, run, samples, x: Inputs):
    k = cfg.block_topk
    for pos_name in cfg.position_dtypes:
        for _ in range(samples):
            rows = rng.randint(1, cfg.max_num_batched_tokens)
            run(
                kernels.expand_qsa_block_indices,
                _view(x.ints((rows, k), cfg.num_columns), rng),
                _view(
                    x.ints((rows,), cfg.num_columns * cfg.compress_ratio, torch_dtype(pos_name)),
                    rng,
                ),
                _view(x.ints((rows,), cfg.num_columns + 1), rng),
                cfg.compress_ratio,
                cfg.token_topk,
                _view(x.out((rows, cfg.token_topk + cfg.compress_ratio)), rng),
            )


def sweep_envelope(
    cfg: DeploymentConfig, run, *, seed: int = 0, samples: int = 24, inputs: Inputs | None = None
):
    """Call ``run(op, *args)`` for every point of the randomized envelope sweep."""
    rng = random.Random(seed)
    x = inputs or Inputs()
    _decode_sweep(cfg, rng, run, x)
    _prefill_sweep(cfg, rng, run, samples, x)
    _expand_sweep(cfg, rng, run, max(2, samples // 4), x)


def trace_envelope(
    cfg: DeploymentConfig, plan: Plan, *, seed: int = 0, samples: int = 24
) -> TraceResult:
    """Sweep the envelope under the plan's target; every request is refused and recorded."""
    launches = 0

    def run(fn, *args, **kwargs):
        nonlocal launches
        launches += 1
        fn(*args, **kwargs)

    target = tc.parse_target(plan.target)
    with (
        tc.active_driver(target),
        kernels.assume_arch(target.arch),
        tc.capture_requests(block=True) as seen,
    ):
        sweep_envelope(cfg, run, seed=seed, samples=samples)
    return held_against(plan, seen, launches)
