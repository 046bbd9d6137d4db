"""Every Triton function or attribute qsa_warmup replaces, recorded so it can be put back.

Putting back is polite: where another library has since replaced the same attribute (typically
chaining onto ours, as vLLM's JIT monitor chains onto Triton's hooks), its value stays, and ours,
still in its chain, is told by :func:`is_replaced` that it is no longer installed."""

from __future__ import annotations

import threading

__all__ = ["replace", "original", "is_replaced", "restore"]

_lock = threading.Lock()
# (id(owner), name) -> (owner, name, Triton's value, the value set here)
_originals: dict[tuple[int, str], tuple[object, str, object, object]] = {}


def replace(owner, name: str, new) -> object:
    """Set ``owner.name = new``, remembering the value Triton had; returns that value. Replacing
    again keeps the first original, so :func:`restore` always puts back Triton's own."""
    with _lock:
        key = (id(owner), name)
        first = _originals[key][2] if key in _originals else getattr(owner, name)
        _originals[key] = (owner, name, first, new)
        setattr(owner, name, new)
        return first


def original(owner, name: str):
    """Triton's own value of ``owner.name``, replaced or not."""
    entry = _originals.get((id(owner), name))
    return entry[2] if entry else getattr(owner, name)


def is_replaced(owner, name: str) -> bool:
    return (id(owner), name) in _originals


def restore(owner=None, name: str | None = None) -> int:
    """Forget every replacement (all, those of ``owner``, or one) and put Triton's value back
    where ours is still the attribute's value; returns how many were put back."""
    with _lock:
        keys = [
            k
            for k, (o, n, _, _) in _originals.items()
            if (owner is None or o is owner) and (name is None or n == name)
        ]
        put_back = 0
        for key in keys:
            o, n, value, ours = _originals.pop(key)
            if getattr(o, n) is ours:
                setattr(o, n, value)
                put_back += 1
        return put_back
