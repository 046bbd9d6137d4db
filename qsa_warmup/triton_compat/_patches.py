"""Every Triton function or attribute qsa_warmup replaces, recorded so it can be put back."""

from __future__ import annotations

import threading

__all__ = ["replace", "original", "is_replaced", "restore"]

_lock = threading.Lock()
_originals: dict[
    tuple[int, str], tuple[object, str, object]
] = {}  # (id(owner), name) -> (owner, name, original)


def replace(owner, name: str, new) -> object:
    """Set ``owner.name = new``, remembering the value Triton had; returns that value. Replacing
    again keeps the first original, so :func:`restore` always puts back Triton's own."""
    with _lock:
        key = (id(owner), name)
        if key not in _originals:
            _originals[key] = (owner, name, getattr(owner, name))
        setattr(owner, name, new)
        return _originals[key][2]


def original(owner, name: str):
    """Triton's own value of ``owner.name``, replaced or not."""
    entry = _originals.get((id(owner), name))
    return entry[2] if entry else getattr(owner, name)


def is_replaced(owner, name: str) -> bool:
    return (id(owner), name) in _originals


def restore(owner=None, name: str | None = None) -> int:
    """Put back Triton's originals (all, those of ``owner``, or one); returns how many."""
    with _lock:
        keys = [
            k
            for k, (o, n, _) in _originals.items()
            if (owner is None or o is owner) and (name is None or n == name)
        ]
        for key in keys:
            o, n, value = _originals.pop(key)
            setattr(o, n, value)
        return len(keys)
