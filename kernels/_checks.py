"""Argument checks for the public ops: each error names the argument and the fix."""

from __future__ import annotations

import torch

from .limits import CACHE_DTYPES, MAX_HEAD_DIM, MAX_HEADS, MIN_HEAD_DIM, MIN_HEADS, POSITION_DTYPES

SUPPORTED_CACHE_DTYPES = tuple(getattr(torch, name) for name in CACHE_DTYPES)
SUPPORTED_POSITION_DTYPES = tuple(getattr(torch, name) for name in POSITION_DTYPES)


def is_tensor_like(x) -> bool:
    return (
        x.__class__ is torch.Tensor
        or hasattr(x, "shape")
        and hasattr(x, "dtype")
        and hasattr(x, "data_ptr")
    )


# These run on every eager call: each check is a few attribute reads on the passing path; the
# error messages are only built when a check fails.
def check_tensor(name: str, x, *, ndim: int | None = None, dtypes: tuple | None = None):
    if not is_tensor_like(x):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dtypes is not None and x.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise TypeError(
            f"{name} has dtype {x.dtype}; expected one of: {names} (convert with .to())"
        )
    if ndim is not None and len(x.shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")


def check_shape(name: str, x, expected: tuple) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} has shape {tuple(x.shape)}; expected {tuple(expected)}")


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_same_device(**tensors) -> None:
    names = iter(tensors)
    first_name = next(names)
    first = tensors[first_name].device
    for name in names:
        device = tensors[name].device
        if device != first:
            raise ValueError(
                f"{name} is on {device} but {first_name} is on {first}; move them to one device"
            )


def check_last_dim_contiguous(name: str, x) -> None:
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        raise ValueError(
            f"{name} must be contiguous in its last dimension (stride {x.stride(-1)}); "
            "call .contiguous()"
        )


def check_aligned(name: str, x) -> None:
    # The hot kernels specialize on 16-byte alignment of these pointers; an unaligned view
    # would silently request a variant that no warmup plan contains.
    if x.data_ptr() % 16:
        raise ValueError(
            f"{name} must start on a 16-byte boundary; pass a fresh tensor or .clone() the view"
        )


def check_topk_geometry(token_topk, compress_ratio) -> int:
    """Validate ``token_topk``/``compress_ratio``; returns the number of blocks selected per row."""
    check_int("compress_ratio", compress_ratio, minimum=1)
    check_int("token_topk", token_topk, minimum=1)
    if token_topk % compress_ratio:
        raise ValueError(
            f"token_topk ({token_topk}) must be a multiple of compress_ratio ({compress_ratio}); "
            f"round it to {token_topk // compress_ratio * compress_ratio or compress_ratio}"
        )
    return token_topk // compress_ratio


def check_scoring_inputs(q, k_cache) -> tuple[int, int, int]:
    """Shared checks of q [rows, heads, head_dim] and k_cache [blocks, page_size, 1, head_dim]."""
    check_tensor("q", q, ndim=3, dtypes=SUPPORTED_CACHE_DTYPES)
    check_tensor("k_cache", k_cache, ndim=4, dtypes=SUPPORTED_CACHE_DTYPES)
    if q.dtype != k_cache.dtype:
        raise TypeError(
            f"q has dtype {q.dtype} but k_cache has {k_cache.dtype}; q must have the cache's dtype"
        )
    _, num_heads, head_dim = q.shape
    if not MIN_HEADS <= num_heads <= MAX_HEADS:
        raise ValueError(f"q has {num_heads} heads; supported: {MIN_HEADS}..{MAX_HEADS}")
    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"q has head_dim {head_dim}; supported: {MIN_HEAD_DIM}..{MAX_HEAD_DIM}")
    if k_cache.shape[2] != 1 or k_cache.shape[3] != head_dim:
        raise ValueError(
            f"k_cache has shape {tuple(k_cache.shape)}; "
            f"expected [blocks, page_size, 1, {head_dim}] (head_dim of q)"
        )
    if not q.is_contiguous():
        raise ValueError("q must be contiguous; call q.contiguous()")
    if not k_cache.is_contiguous():
        raise ValueError("k_cache must be contiguous")
    check_aligned("q", q)
    check_aligned("k_cache", k_cache)
    return num_heads, head_dim, k_cache.shape[1]


def check_block_indices(block_indices, q, block_topk: int) -> None:
    """The selects' output: int32 [rows of q, block_topk], contiguous rows, on q's device."""
    check_tensor("block_indices", block_indices, ndim=2, dtypes=(torch.int32,))
    check_shape("block_indices", block_indices, (q.shape[0], block_topk))
    check_last_dim_contiguous("block_indices", block_indices)
    check_same_device(q=q, block_indices=block_indices)
