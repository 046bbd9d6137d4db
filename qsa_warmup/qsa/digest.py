"""The identity of what a QSA plan is computed from besides config, target and toolchain.

Apart from the planner so that commands which only compare digests (``gc``) do not import
torch and the kernels to compute one.
"""

from __future__ import annotations

import functools
import hashlib
import os

import kernels

from .. import triton_compat as tc
from .._fs import files_digest

__all__ = ["plan_source_digest"]


def plan_source_digest() -> str:
    """Identity of what a plan is computed from besides config, target and toolchain: the
    ``kernels`` source, the planner, and the knobs Triton's binder folds into its keys."""
    knobs_digest = hashlib.sha256(tc.binding_knobs().encode()).hexdigest()[:8]
    return f"{_source_digest()}-{knobs_digest}"


@functools.lru_cache(maxsize=1)  # source files do not change under a running process
def _source_digest() -> str:
    folder = os.path.dirname(kernels.__file__)
    sources = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".py")]
    here = os.path.dirname(__file__)
    planners = [os.path.join(here, "planning.py"), os.path.join(here, "..", "planner.py")]
    return files_digest(sources + planners)
