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

__all__ = ["plan_source_digest"]


def plan_source_digest() -> str:
    """Identity of what a plan is computed from besides config, target and toolchain: the
    ``kernels`` source, the planner, and the knobs Triton's binder folds into its keys."""
    knobs_digest = hashlib.sha256(tc.binding_knobs().encode()).hexdigest()[:8]
    return f"{_source_digest()}-{knobs_digest}"


@functools.lru_cache(maxsize=1)  # source files do not change under a running process
def _source_digest() -> str:
    h = hashlib.sha256()
    folder = os.path.dirname(kernels.__file__)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    here = os.path.dirname(__file__)
    for path in (os.path.join(here, "planning.py"), os.path.join(here, "..", "planner.py")):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]
