"""Shared input builders and comparisons for the kernel tests."""

import torch

INT_POISON = -7  # never a valid output (indices are >= -1)


def score_rtol(dtype, *, prefill=False):
    """Relative error allowed against float64 scores. The inputs are exact in their dtype and
    accumulation is fp32, except fp8 on sm_90 GPUs, where wgmma accumulates at reduced precision
    between promotions (decode promotes every 32 products; prefill once per 128-deep dot)."""
    if dtype == torch.float8_e4m3fn and torch.cuda.is_available():
        return 1e-2 if prefill else 1e-4
    return 1e-5


def make_cache(num_blocks, page_size, head_dim, dtype, device, gen):
    return torch.randn(num_blocks, page_size, 1, head_dim, generator=gen).to(dtype).to(device)


def make_q(rows, heads, head_dim, dtype, device, gen):
    return torch.randn(rows, heads, head_dim, generator=gen).to(dtype).to(device)


def make_page_table(num_reqs, width, num_blocks, device, gen):
    return torch.randint(0, num_blocks, (num_reqs, width), generator=gen, dtype=torch.int32).to(
        device
    )


def assert_scores_match(got, want, *, rtol):
    """got: float32 logits poisoned with NaN; want: float64 reference, NaN where not visible."""
    got = got.double().cpu()
    visible = ~torch.isnan(want)
    assert torch.equal(~torch.isnan(got), visible), (
        "written columns differ from the visible columns"
    )
    if visible.any():
        err = (got[visible] - want[visible]).norm() / want[visible].norm().clamp_min(1e-30)
        assert err <= rtol, f"relative error {err:.2e} > {rtol}"


def assert_topk_matches(out, values, lengths, k, *, atol=0.0, rtol=0.0):
    """Tie-aware: each row holds k distinct in-range indices whose values are the k largest."""
    out = out.cpu().long()
    values = values.double().cpu()
    assert not (out == INT_POISON).any(), "some output elements were not written"
    for row in range(out.shape[0]):
        n = max(0, min(int(lengths[row]), values.shape[1]))
        got = out[row]
        if n <= k:
            want = torch.cat([torch.arange(n), torch.full((k - n,), -1)])
            assert torch.equal(got, want), (
                f"row {row} (length {n} <= k {k}): {got.tolist()[:16]}..."
            )
            continue
        assert len(set(got.tolist())) == k, f"row {row}: indices not distinct"
        assert got.min() >= 0 and got.max() < n, f"row {row}: index outside [0, {n})"
        picked = values[row, got].sort(descending=True).values
        best = values[row, :n].topk(k).values
        assert torch.allclose(picked, best, atol=atol, rtol=rtol), (
            f"row {row}: selected values are not the top-k"
        )


def autotuned_module(second_block: int) -> str:
    """The source of a module whose ``tuned_kernel`` (x += 1 over n elements) is autotuned on
    n over two configs: BLOCK 64 at 2 warps, and ``second_block`` at 4."""
    return f"""
import triton, triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({{"BLOCK": 64}}, num_warps=2),
        triton.Config({{"BLOCK": {second_block}}}, num_warps=4),
    ],
    key=["n"],
)
@triton.jit
def tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
"""
