"""Counters of what was done with a cache (loads, compiles, fetches, rebuilds), kept in the
cache folder by the startup hook and by ``prebuild``, and what the cache holds.

The counters live in one small JSON file (``CacheFolder.counters_path``), updated
read-modify-write under an exclusive ``flock`` on a lock file in ``locks/``, so concurrent
writers (the ranks of a host starting together, several builds) never lose an increment. A
cache that cannot be written keeps no counters (a read-only image): counting never stops a
start.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from typing import Iterator

from ._fs import atomic_write_json, read_json
from .cache import CacheFolder

__all__ = ["COUNTERS", "add_counts", "read_counts", "zero_counts", "cache_stats"]

log = logging.getLogger(__name__)

COUNTERS = ("starts", "loads", "compiles", "fetched", "rebuilt_after_damage", "builds")


@contextlib.contextmanager
def _counters_locked(folder: CacheFolder) -> Iterator[str]:
    fd = os.open(folder.lock_path("counters"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield folder.counters_path
    finally:
        os.close(fd)  # releases the lock


def add_counts(folder: CacheFolder, **counts: int) -> None:
    """Add ``counts`` to the folder's counters (nothing happens where it cannot be written)."""
    counts = {k: v for k, v in counts.items() if v}
    if not counts:
        return
    try:
        os.makedirs(folder.lock_dir, exist_ok=True)
        with _counters_locked(folder) as path:
            current = _decoded(read_json(path))
            for name, value in counts.items():
                current[name] = current.get(name, 0) + int(value)
            atomic_write_json(path, current, durable=False)
    except OSError as exc:
        log.debug("counters of %s not kept (%s)", folder.root, exc)


def read_counts(folder: CacheFolder) -> dict[str, int]:
    current = _decoded(read_json(folder.counters_path))
    return {name: current.get(name, 0) for name in COUNTERS}


def zero_counts(folder: CacheFolder) -> None:
    os.makedirs(folder.lock_dir, exist_ok=True)
    with _counters_locked(folder) as path:
        atomic_write_json(path, {}, durable=False)


def _decoded(value) -> dict:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in COUNTERS and isinstance(v, int)}


def cache_stats(folder: CacheFolder) -> dict:
    """manifests, entries and bytes the folder holds, and its counters."""
    try:
        names = os.listdir(folder.qsa_dir)
    except OSError:
        names = []
    manifests = sum(os.path.isfile(os.path.join(folder.qsa_dir, n, "manifest.json")) for n in names)
    return {
        "cache_dir": folder.root,
        "manifests": manifests,
        **folder.stats(),
        "counters": read_counts(folder),
    }
