"""Triton's file cache: its layout (``<dir>/<base32 hash>/``, ``__grp__*.json`` group files that
hold absolute paths), a manager that resolves those paths inside whatever folder the cache now
lives in, and the layered manager a serving process installs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from typing import Callable, Iterator

from triton import knobs
from triton.runtime.cache import FileCacheManager, _base32

from .._fs import atomic_write_json

__all__ = [
    "file_cache_dirname",
    "group_file_paths",
    "repointed_group",
    "repoint_group_file",
    "RelocatingCacheManager",
    "make_layered_manager",
    "install_cache_manager",
    "set_triton_cache",
    "use_triton_cache_dir",
    "triton_cache_dir",
    "store_binaries_only",
    "GROUP_PREFIX",
]

GROUP_PREFIX = "__grp__"


def file_cache_dirname(compile_hash: str) -> str:
    """The folder Triton's file cache keeps a compiled kernel in (the compile hash, base32)."""
    return _base32(compile_hash)


def group_file_paths(entry_dir: str) -> list[str]:
    return sorted(
        os.path.join(entry_dir, n) for n in os.listdir(entry_dir) if n.startswith(GROUP_PREFIX)
    )


def repointed_group(path: str) -> tuple[dict, bool]:
    """A group file's content with its child paths moved into the group's own folder, and
    whether that changed anything (unreadable files count as unchanged and empty)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {"child_paths": {}}, False
    children = data.get("child_paths") if isinstance(data, dict) else None
    if not isinstance(children, dict):
        return {"child_paths": {}}, False
    folder = os.path.dirname(os.path.abspath(path))
    fixed = {name: os.path.join(folder, os.path.basename(p)) for name, p in children.items()}
    return {**data, "child_paths": fixed}, fixed != children


def repoint_group_file(path: str) -> bool:
    """Rewrite a group file's child paths to its own folder (atomic). True if it changed."""
    data, changed = repointed_group(path)
    if changed:
        atomic_write_json(path, data)
    return changed


class RelocatingCacheManager(FileCacheManager):
    """Triton's file cache, reading group files by file name inside the entry's own folder, so
    a copied, unpacked or mounted cache hits."""

    def get_group(self, filename):
        grp_path = self._make_path(f"{GROUP_PREFIX}{filename}")
        try:
            with open(grp_path) as f:
                child_paths = json.load(f).get("child_paths")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(child_paths, dict):
            return None
        result = {}
        for child in child_paths:
            path = self._make_path(os.path.basename(child))
            if os.path.exists(path):
                result[child] = path
        return result


def make_layered_manager(
    primary: str,
    overlay: str | None,
    memory: Callable[[], str],
    blocked: set,
    on_write_failure: Callable[[str, OSError], None],
):
    """A cache manager class for a serving process.

    Reads: ``primary``, then ``overlay`` (group files resolved by name, so moved copies hit);
    folders in ``blocked`` (failed checksums) are misses in ``primary``, so Triton compiles
    instead of loading them. Writes: ``primary``; on an OSError (read-only, disk full) the
    ``overlay``; then a memory-backed folder from ``memory()``, so a compile always leaves
    loadable files."""

    class LayeredCacheManager(RelocatingCacheManager):
        def __init__(self, key, override=False, dump=False):
            if override or dump:
                super().__init__(key, override=override, dump=dump)
                return
            self.key = key
            self.lock_path = None
            self._roots = [r for r in (primary, overlay) if r]
            self.cache_dir = os.path.join(primary, key)

        def _existing(self, filename):
            for root in self._roots:
                if root == primary and self.key in blocked:
                    continue  # failed its checksums here: never load it
                path = os.path.join(root, self.key, filename)
                if os.path.exists(path):
                    return path
            return None

        def has_file(self, filename):
            return self._existing(filename) is not None

        def get_file(self, filename):
            return self._existing(filename)

        def get_group(self, filename):
            grp = self._existing(f"{GROUP_PREFIX}{filename}")
            if grp is None:
                return None
            self.cache_dir = os.path.dirname(grp)
            return super().get_group(filename)

        def _use(self, folder):
            self.cache_dir, self.lock_path = folder, os.path.join(folder, "lock")

        def put(self, data, filename, binary=True):
            last = None
            for root in self._roots + [None]:
                folder = os.path.join(root if root else memory(), self.key)
                try:
                    os.makedirs(folder, exist_ok=True)
                    self._use(folder)
                    return FileCacheManager.put(self, data, filename, binary)
                except OSError as exc:
                    last = exc
                    on_write_failure(folder, exc)
            raise last

        def put_group(self, filename, group):
            # the group must sit beside its children: write it where the last child went
            self._use(os.path.dirname(next(iter(group.values()))) if group else self.cache_dir)
            try:
                return FileCacheManager.put_group(self, filename, group)
            except OSError as exc:
                on_write_failure(self.cache_dir, exc)
                mem = os.path.join(memory(), self.key)
                os.makedirs(mem, exist_ok=True)
                moved = {}
                for name, path in group.items():
                    target = os.path.join(mem, os.path.basename(path))
                    if os.path.abspath(path) != target:
                        shutil.copyfile(path, target)
                    moved[name] = target
                self._use(mem)
                return FileCacheManager.put_group(self, filename, moved)

    return LayeredCacheManager


def install_cache_manager(manager_class, triton_dir: str) -> None:
    knobs.cache.dir = triton_dir
    knobs.cache.manager_class = manager_class


def set_triton_cache(path: str, manager_class=None) -> None:
    """Point this process's Triton file cache at ``path`` (for worker processes)."""
    install_cache_manager(manager_class or RelocatingCacheManager, path)


def triton_cache_dir() -> str | None:
    return knobs.cache.dir


@contextlib.contextmanager
def use_triton_cache_dir(path: str, manager_class=None) -> Iterator[None]:
    previous_dir, previous_cls = knobs.cache.dir, knobs.cache.manager_class
    knobs.cache.dir = path
    knobs.cache.manager_class = manager_class
    try:
        yield
    finally:
        knobs.cache.dir, knobs.cache.manager_class = previous_dir, previous_cls


def store_binaries_only(enabled: bool = True) -> None:
    """Keep only the binary and metadata of each compile (no IR): smaller, faster-loading cache.
    Not part of Triton's cache key, so plain Triton processes hit such entries too."""
    knobs.compilation.store_binary_only = enabled
