"""The ops' limits and dtype names: one table for the launchers' checks and the deployment config.

Plain Python (no torch, no Triton), so a config can be validated without loading the kernels.
"""

from __future__ import annotations

__all__ = [
    "CACHE_DTYPES",
    "POSITION_DTYPES",
    "SHORT_DTYPE_NAMES",
    "MIN_ARCH",
    "MIN_HEADS",
    "MAX_HEADS",
    "MIN_HEAD_DIM",
    "MAX_HEAD_DIM",
    "min_arch_for",
]

# dtype names as torch spells them (``getattr(torch, name)``)
CACHE_DTYPES = ("bfloat16", "float8_e4m3fn")  # q and the compressed key cache
POSITION_DTYPES = ("int32", "int64")  # query positions of the block expansion
SHORT_DTYPE_NAMES = {"bfloat16": "bf16", "float8_e4m3fn": "fp8", "int32": "i32", "int64": "i64"}

# the oldest CUDA compute capability each cache dtype runs on: fp8 (e4m3) tensor-core math
# needs Ada (sm_89) or newer; bf16 needs Ampere (sm_80)
MIN_ARCH = {"bfloat16": 80, "float8_e4m3fn": 89}

MIN_HEADS, MAX_HEADS = 1, 64
MIN_HEAD_DIM, MAX_HEAD_DIM = 64, 256


def min_arch_for(dtype_name: str) -> int:
    """The oldest compute capability (e.g. 89 for sm_89) that runs ``dtype_name``."""
    return MIN_ARCH.get(dtype_name, 0)
