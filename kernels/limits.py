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
    "SHARED_MEMORY_PER_BLOCK",
    "shared_memory_per_block",
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


# Dynamic shared memory one block may use, per CUDA compute capability (the CUDA programming
# guide's table; Triton 3.6 compiles for each of these)
SHARED_MEMORY_PER_BLOCK = {
    80: 166912,
    86: 101376,
    87: 166912,
    89: 101376,
    90: 232448,
    100: 232448,
    103: 232448,
    120: 101376,
    121: 101376,
}


def shared_memory_per_block(arch: int) -> int | None:
    """Bytes of shared memory one block may use on ``arch`` (e.g. 90), or None if unknown."""
    return SHARED_MEMORY_PER_BLOCK.get(arch)
