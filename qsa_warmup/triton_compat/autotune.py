"""``triton.autotune`` winners: the config each autotuner chose for a key while a run was
recorded, and that choice given back to a server's autotuner so it neither benchmarks nor
compiles for that key.

Triton 3.6's ``Autotuner.run`` benchmarks only when its tuning key (the values of the ``key``
arguments, then the dtype of every tensor argument, as strings) is not in ``Autotuner.cache``;
the winner it stores there is one of ``Autotuner.configs``. A winner is kept as the config's
constexprs and options, and given back as the autotuner's own equal config object (its
pre-hook included), never as a new one."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

from triton.runtime.autotuner import Autotuner

from . import _patches

__all__ = [
    "AutotuneWinner",
    "recording_autotune_winners",
    "apply_autotune_winner",
    "find_autotuner",
    "tuned_jit_function",
    "winner_of",
]

_JSON_SCALARS = (int, float, str, bool, type(None))


@dataclass(frozen=True)
class AutotuneWinner:
    module: str
    qualname: str
    source_hash: str  # of the JIT function under the autotuner (recorded.source_hash)
    key: tuple  # the autotuner's tuning key
    config: tuple  # sorted (name, value) pairs: constexprs, num_warps, num_stages, ...
    target: str
    measured: bool  # benchmarked on a GPU (False: under the offline driver, an arbitrary pick)

    def to_json(self) -> dict:
        data = asdict(self)
        data["key"] = list(self.key)
        data["config"] = dict(self.config)
        return data

    @classmethod
    def from_json(cls, obj: dict) -> "AutotuneWinner":
        key, config = obj["key"], obj["config"]
        if not isinstance(key, list) or not isinstance(config, dict):
            raise TypeError("key must be a list and config an object")
        return cls(
            module=str(obj["module"]),
            qualname=str(obj["qualname"]),
            source_hash=str(obj["source_hash"]),
            key=tuple(key),
            config=tuple(sorted(config.items())),
            target=str(obj["target"]),
            measured=bool(obj["measured"]),
        )

    @property
    def identity(self) -> tuple:
        return (self.module, self.qualname, self.key, self.target)


def _config_items(config) -> tuple | None:
    """A Triton Config as sorted JSON-able (name, value) pairs; None when it holds anything
    else (such a winner is not kept)."""
    items = dict(config.kwargs)
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        items[name] = getattr(config, name, None)
    if getattr(config, "ir_override", None) is not None:
        return None
    if not all(isinstance(v, _JSON_SCALARS) for v in items.values()):
        return None
    return tuple(sorted(items.items()))


@contextlib.contextmanager
def recording_autotune_winners(
    on_winner: Callable[[object, tuple, tuple], None],
) -> Iterator[None]:
    """Call ``on_winner(autotuner, key, config_items)`` once for every (autotuner, key) whose
    winner is chosen in this process from now on (any ``triton.autotune`` kernel)."""
    run = Autotuner.run
    reported: set = set()
    lock = threading.Lock()

    def recording_run(self, *args, **kwargs):
        try:
            return run(self, *args, **kwargs)
        finally:
            for key, config in list(self.cache.items()):
                with lock:
                    if (id(self), key) in reported:
                        continue
                    reported.add((id(self), key))
                items = _config_items(config)
                if items is not None and all(isinstance(k, _JSON_SCALARS) for k in key):
                    on_winner(self, key, items)

    _patches.replace(Autotuner, "run", recording_run)
    try:
        yield
    finally:
        _patches.restore(Autotuner, "run")


def winner_of(autotuner, key: tuple, config_items: tuple) -> AutotuneWinner:
    """The winner an autotuner chose for ``key`` on the active driver's target."""
    from triton.runtime.driver import driver

    from .recorded import source_hash
    from .targets import OfflineDriver, target_name

    fn = autotuner.base_fn
    active = driver.active
    return AutotuneWinner(
        module=fn.__module__,
        qualname=fn.__qualname__,
        source_hash=source_hash(tuned_jit_function(autotuner)),
        key=tuple(key),
        config=config_items,
        target=target_name(active.get_current_target()),
        measured=not isinstance(active, OfflineDriver),
    )


def find_autotuner(module: str, qualname: str):
    """The Autotuner ``module.qualname`` names or wraps (under heuristics), else None."""
    from .recorded import KernelNotFound, named_object, unwrapped

    try:
        obj = named_object(module, qualname)
    except KernelNotFound:  # the caller names the kernel and the fix
        return None
    return unwrapped(obj, lambda o: isinstance(o, Autotuner))


def tuned_jit_function(autotuner):
    """The JITFunction an autotuner tunes (under any heuristics between them)."""
    from .loader import is_jit_function
    from .recorded import unwrapped

    return unwrapped(autotuner.fn, is_jit_function)


def apply_autotune_winner(autotuner, winner: AutotuneWinner) -> bool:
    """Put the autotuner's own config equal to ``winner`` in its cache under the winner's key
    (it then launches that config for the key without benchmarking); False when none of its
    configs is equal (the code's configs changed since the recording)."""
    for config in autotuner.configs:
        if _config_items(config) == winner.config:
            autotuner.cache[winner.key] = config
            return True
    return False
