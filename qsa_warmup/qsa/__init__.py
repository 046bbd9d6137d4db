"""The QSA kernels registered as a kernel family: their deployment config, their planning (the
launchers' own dispatch functions walked over the envelope) and their trace (the launchers run
on CPU tensors). The only part of qsa_warmup that imports ``kernels``."""

from __future__ import annotations

from .family import QSAFamily

__all__ = ["QSAFamily"]
