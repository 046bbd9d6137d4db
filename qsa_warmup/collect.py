"""Keeping a cache folder tidy and within a disk budget: ``qsa-warmup gc`` and ``clear``.

What ``gc`` removes:

- what no manifest names: Triton folders of kernels no entry points to (a plain Triton process
  sharing the folder, a rebuild that replaced them), plan memos of manifests that are gone or
  of older kernel source, toolchain memo files this host's toolchain would never read, temp
  files and folders an interrupted write left, anything else not in the cache's layout;
- with ``--older-than AGE``: manifests not used for that long;
- with ``--max-size SIZE``: the least recently used manifests, until the folder fits.

A manifest goes with its entries, its plan memos and the Triton folders no remaining manifest
names, so every remaining manifest still passes ``check``. Triton folders holding only host
modules (the C launchers, shared by every manifest, compiled on the server) are kept.

"Used" is the later of the manifest's last write and the last start that loaded from it (the
hook touches ``qsa/<manifest>/used``; a read-only cache cannot record its starts).

Safe beside running starts: every start and build holds a shared ``flock`` on
``locks/gc.lock`` while it verifies and loads, and ``gc`` removes only under the exclusive lock,
so nothing is removed under a process that is reading it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator

from . import triton_compat as tc
from ._fs import read_json
from .cache import CacheFolder
from .errors import CacheError, ConfigError

__all__ = [
    "in_use",
    "mark_used",
    "collect_garbage",
    "clear_cache",
    "GcReport",
    "parse_size",
    "parse_age",
]

log = logging.getLogger(__name__)

_LOCK = "gc"
_USED = "used"
_LAYOUT = ("triton", "qsa", "plans", "toolchain-memo", "locks", "counters.json")
_TEMP_PREFIXES = (".tmp-", ".import-", ".fetch-", ".probe-", ".gc-")
_TEMP_GRACE = 3600.0  # seconds: a younger temp name may be a write in progress


# -- locks ------------------------------------------------------------------------------------


def _open_lock(folder: CacheFolder, *, create: bool) -> int | None:
    path = folder.lock_path(_LOCK)
    try:
        if create:
            os.makedirs(folder.lock_dir, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        return os.open(path, os.O_RDONLY)  # flock works on a read-only descriptor too
    except OSError:
        return None


def _flock(fd: int, mode: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                return False
        time.sleep(0.02)


@contextlib.contextmanager
def in_use(folder: CacheFolder, timeout: float = 60.0) -> Iterator[None]:
    """Held by starts and builds while they read a folder: ``gc`` waits for them. Where the
    lock file cannot be opened (a read-only cache never collected), nothing is held."""
    fd = _open_lock(folder, create=folder.writable()) or _open_lock(folder, create=False)
    if fd is not None and not _flock(fd, fcntl.LOCK_SH, timeout):
        log.warning("%s: gc held the cache for over %.0f s; going on", folder.root, timeout)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def _collecting(folder: CacheFolder, timeout: float) -> Iterator[None]:
    fd = _open_lock(folder, create=True)
    if fd is None:
        raise CacheError(folder.root, "cannot create its gc lock; is it writable?")
    try:
        if not _flock(fd, fcntl.LOCK_EX, timeout):
            raise CacheError(
                folder.root,
                f"in use by a start or build for over {timeout:.0f} s; run gc again later "
                "(or raise QSA_WARMUP_LOCK_TIMEOUT)",
            )
        yield
    finally:
        os.close(fd)


def mark_used(manifest_dir: str) -> None:
    """Record that a start loaded from this manifest (its ``used`` stamp, for LRU)."""
    path = os.path.join(manifest_dir, _USED)
    try:
        os.utime(path)
    except FileNotFoundError:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError:
            pass
    except OSError:
        pass  # read-only: its starts go unrecorded


# -- input ------------------------------------------------------------------------------------

_SIZE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_SIZE_UNITS.update({"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40})
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """Bytes from ``500M``, ``2G``, ``1.5GiB``, ``0`` (k/M/G/T: powers of 1000; Ki/Mi/Gi/Ti:
    of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*", text.lower())
    if not m:
        raise ConfigError("--max-size", f"{text!r} is not a size; give e.g. 500M, 2G or 1.5GiB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2) or ""])


def parse_age(text: str) -> float:
    """Seconds from ``30d``, ``12h``, ``45m``, ``90s`` or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not m:
        raise ConfigError("--older-than", f"{text!r} is not an age; give e.g. 30d, 12h or 90s")
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


# -- what the folder holds --------------------------------------------------------------------


@dataclass
class _Manifest:
    name: str
    path: str
    used: float
    folders: set[str]


def _size(path: str) -> int:
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            return os.lstat(path).st_size
        except OSError:
            return 0
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                pass
    return total


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _manifests(folder: CacheFolder) -> tuple[list[_Manifest], list[str]]:
    """(manifests, stray paths under qsa/: folders without a manifest, temp names)."""
    manifests, stray = [], []
    for name in _listdir(folder.qsa_dir):
        path = os.path.join(folder.qsa_dir, name)
        if name.startswith(_TEMP_PREFIXES) or not os.path.isfile(
            os.path.join(path, "manifest.json")
        ):
            stray.append(path)
            continue
        folders = set()
        for entry_name in _listdir(os.path.join(path, "entries")):
            entry = read_json(os.path.join(path, "entries", entry_name))
            if isinstance(entry, dict) and isinstance(entry.get("folder"), str):
                folders.add(entry["folder"])
        used = max(_mtime(os.path.join(path, "manifest.json")), _mtime(os.path.join(path, _USED)))
        manifests.append(_Manifest(name, path, used, folders))
    return manifests, stray


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _host_modules_only(path: str) -> bool:
    """A Triton folder of C launchers or utility modules (compiled on the server, no entry
    names them): only ``.so`` files, besides a group file."""
    names = [n for n in _listdir(path) if not n.startswith("__grp__")]
    return bool(names) and all(n.endswith(".so") for n in names)


def _plan_memos(folder: CacheFolder, keep: set[str], digest: str | None) -> list[str]:
    """Plan memos (``<manifest>-<source digest>.json``) of manifests not kept, or of other
    kernel source than ``digest``."""
    stale = []
    for name in _listdir(folder.plans_dir):
        owner = next((m for m in keep if name.startswith(m + "-")), None)
        if owner is None or (digest is not None and name != f"{owner}-{digest}.json"):
            stale.append(os.path.join(folder.plans_dir, name))
    return stale


def _stray_at_root(folder: CacheFolder) -> list[str]:
    stray = [os.path.join(folder.root, n) for n in _listdir(folder.root) if n not in _LAYOUT]
    for sub in (folder.triton_dir, folder.plans_dir, folder.memo_dir):
        stray += [os.path.join(sub, n) for n in _listdir(sub) if n.startswith(_TEMP_PREFIXES)]
    return stray


# -- gc ---------------------------------------------------------------------------------------


@dataclass
class GcReport:
    cache_dir: str
    dry_run: bool
    bytes_before: int
    bytes_after: int
    manifests: list[str] = field(default_factory=list)  # manifests removed (LRU or old)
    triton_folders: int = 0  # Triton folders removed
    plan_memos: int = 0
    toolchain_memos: int = 0
    stray: list[str] = field(default_factory=list)  # paths outside the layout, temp leftovers

    @property
    def freed(self) -> int:
        return self.bytes_before - self.bytes_after

    def to_json(self) -> dict:
        return {**asdict(self), "freed": self.freed}


def collect_garbage(
    folder: CacheFolder,
    *,
    max_size: int | None = None,
    older_than: float | None = None,
    dry_run: bool = False,
    plan_digest: str | None = None,
    timeout: float = 600.0,
) -> GcReport:
    """Remove what no manifest needs, old manifests and, LRU first, manifests over the size
    cap (see the module's doc). ``plan_digest``: the kernel source's plan digest (plan memos of
    other source are removed). ``dry_run``: report only."""
    if not _is_cache(folder):
        return GcReport(folder.root, dry_run, 0, 0)
    if not folder.writable():
        raise CacheError(folder.root, "is read-only here; gc needs to write it")
    with _collecting(folder, timeout):
        return _collect(folder, max_size, older_than, dry_run, plan_digest)


def _is_cache(folder: CacheFolder) -> bool:
    """False for a folder that does not exist (nothing to do); CacheError for one that does
    not look like a cache (a mistyped --cache-dir must never lose a user's files)."""
    folder.check_usable()
    if not os.path.isdir(folder.root):
        return False
    if os.path.isdir(folder.qsa_dir) or os.path.isdir(folder.triton_dir):
        return True
    if not _listdir(folder.root):
        return False
    raise CacheError(
        folder.root,
        "does not look like a qsa-warmup cache (no qsa/ or triton/ folder); nothing removed",
    )


def _collect(folder, max_size, older_than, dry_run, plan_digest) -> GcReport:
    sizes: dict[str, int] = {}

    def size_of(paths) -> int:
        return sum(sizes.setdefault(p, _size(p)) for p in paths)

    before = _size(folder.root)
    manifests, stray = _manifests(folder)
    stray = [p for p in stray + _stray_at_root(folder) if _left_behind(p)]
    now = time.time()
    dropped = [m for m in manifests if older_than is not None and now - m.used > older_than]
    kept = [m for m in manifests if m not in dropped]
    named = set().union(*(m.folders for m in manifests))
    unnamed = [
        os.path.join(folder.triton_dir, n)
        for n in _listdir(folder.triton_dir)
        if n not in named
        and not n.startswith(_TEMP_PREFIXES)
        and not _host_modules_only(os.path.join(folder.triton_dir, n))
    ]
    memos = tc.stale_memo_files(folder.memo_dir)
    unneeded = size_of(stray + unnamed + memos)

    def manifest_paths(dropped, kept) -> list[str]:
        """What removing ``dropped`` while ``kept`` stay removes: their folders, the Triton
        folders only they name, their plan memos."""
        theirs = _only_theirs(dropped, kept)
        return (
            [m.path for m in dropped]
            + [os.path.join(folder.triton_dir, n) for n in sorted(theirs)]
            + [p for m in dropped for p in _memos_of(folder, m)]
        )

    # the size cap: least recently used first, each with the files only it names
    for manifest in sorted(kept, key=lambda m: m.used) if max_size is not None else []:
        if before - unneeded - size_of(manifest_paths(dropped, kept)) <= max_size:
            break
        kept.remove(manifest)
        dropped.append(manifest)
    doomed = manifest_paths(dropped, kept)
    plan_memos = [p for p in _plan_memos(folder, {m.name for m in kept}, plan_digest)]
    plan_memos = [p for p in plan_memos if p not in doomed]
    report = GcReport(
        folder.root,
        dry_run,
        before,
        before - unneeded - size_of(doomed + plan_memos),
        manifests=sorted(m.name for m in dropped),
        triton_folders=len(unnamed) + len(_only_theirs(dropped, kept)),
        plan_memos=len(plan_memos) + sum(len(_memos_of(folder, m)) for m in dropped),
        toolchain_memos=len(memos),
        stray=sorted(os.path.relpath(p, folder.root) for p in stray),
    )
    if dry_run:
        return report
    for manifest in dropped:  # first: no start finds a manifest whose files are going
        _remove_manifest(folder, manifest)
    for path in doomed + unnamed:
        if os.path.dirname(path) == folder.triton_dir:
            _remove_triton_folder(path)
    for path in plan_memos + memos + stray:
        _remove(path)
    report.bytes_after = _size(folder.root)
    return report


def _left_behind(path: str) -> bool:
    """Not a write in progress: temp names count as left behind after an hour."""
    name = os.path.basename(path)
    return not name.startswith(_TEMP_PREFIXES) or time.time() - _mtime(path) > _TEMP_GRACE


def _memos_of(folder: CacheFolder, manifest: _Manifest) -> list[str]:
    return [
        os.path.join(folder.plans_dir, n)
        for n in _listdir(folder.plans_dir)
        if n.startswith(manifest.name + "-")
    ]


def _only_theirs(dropped: list[_Manifest], kept: list[_Manifest]) -> set[str]:
    still_named = set().union(*(m.folders for m in kept))
    return set().union(*(m.folders for m in dropped)) - still_named


def _remove_manifest(folder: CacheFolder, manifest: _Manifest) -> None:
    # renamed away in one step, then deleted: a start sees the manifest whole or not at all
    doomed = os.path.join(folder.qsa_dir, f".gc-{manifest.name}")
    try:
        os.rename(manifest.path, doomed)
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)
    for path in _memos_of(folder, manifest):
        _remove(path)


def _remove_triton_folder(path: str) -> None:
    # the group file first: Triton takes a folder without one for a miss
    for grp in tc.group_file_paths(path) if os.path.isdir(path) else []:
        _remove(grp)
    _remove(path)


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def clear_cache(folder: CacheFolder, *, timeout: float = 600.0) -> int:
    """Remove everything the folder holds but its locks (under the gc lock); returns bytes
    freed."""
    if not _is_cache(folder):
        return 0
    if not folder.writable():
        raise CacheError(folder.root, "is read-only here; clear needs to write it")
    with _collecting(folder, timeout):
        before = _size(folder.root)
        for manifest in _manifests(folder)[0]:
            _remove_manifest(folder, manifest)
        for name in _listdir(folder.root):
            if name != "locks":
                _remove(os.path.join(folder.root, name))
        return before - _size(folder.root)
