"""The persistent kernel cache: folders, and one object bound to a deployment that answers for
each planned spec.

Layout of a cache folder (named here and nowhere else)::

    triton/                                Triton's file cache (TRITON_CACHE_DIR points here)
      <base32 compile hash>/...            one folder per compiled kernel, Triton's own files
    qsa/<geometry>-<target>-<toolchain>/   one manifest per (config, target, toolchain)
      manifest.json                        config, fingerprint parts, planned spec ids
      entries/<spec id>.json               Triton key, compile hash, sha256 of every file
    plans/<...>.json                       plan memos: a warm start skips planning
    toolchain-memo/                        what Triton recomputes in every process
    locks/                                 compile-once and launcher-build locks (filelock)
    counters.json                          loads, compiles, fetches, rebuilds (stats.py)

A :class:`BoundCache` binds (config, target, toolchain fingerprint) once, over layers: the
primary folder, an overlay where the primary is read-only (one per user, under the user's
cache folder or the temp folder), and a memory-backed folder for a full disk. ``lookup(spec)``
is the one verify path (``prebuild``, ``check`` and the startup hook all use it): the first
layer whose entry passes its checksums answers, else the status says why none did. Every file
qsa writes goes through :func:`._fs.atomic_write` (readable by anyone who can read the folder).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from . import triton_compat as tc
from ._fs import (
    UNREADABLE,
    atomic_write_json,
    can_create_in,
    checked_files,
    read_json,
    sha256_bytes,
)
from .errors import CacheError
from .qsa.config import DeploymentConfig

__all__ = [
    "CacheFolder",
    "BoundCache",
    "Fingerprint",
    "Lookup",
    "overlay_folder",
    "manifest_name",
    "STATES",
]

log = logging.getLogger(__name__)

STATES = ("ok", "missing", "corrupt", "stale", "unloadable")


class CacheFolder:
    """One cache folder's layout. Paths are resolved when the object is made, never at import."""

    def __init__(self, root: str):
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.triton_dir = os.path.join(self.root, "triton")
        self.qsa_dir = os.path.join(self.root, "qsa")
        self.plans_dir = os.path.join(self.root, "plans")
        self.memo_dir = os.path.join(self.root, "toolchain-memo")
        self.lock_dir = os.path.join(self.root, "locks")
        self.counters_path = os.path.join(self.root, "counters.json")

    def __repr__(self) -> str:
        return f"CacheFolder({self.root!r})"

    def lock_path(self, name: str) -> str:
        return os.path.join(self.lock_dir, f"{name}.lock")

    def _nearest_existing(self) -> str:
        """``root``, or its closest ancestor that exists (where ``root`` would be made)."""
        probe = self.root
        while not os.path.lexists(probe):
            probe = os.path.dirname(probe)
        return probe

    def check_usable(self) -> None:
        """CacheError unless ``root`` is a folder or can become one (not a regular file)."""
        probe = self._nearest_existing()
        if not os.path.isdir(probe):
            what = (
                "is not a folder"
                if probe == self.root
                else f"cannot be made: {probe} is not a folder"
            )
            raise CacheError(
                self.root, f"{what}; give --cache-dir (or QSA_WARMUP_CACHE_DIR) a folder"
            )

    def writable(self) -> bool:
        probe = self._nearest_existing()
        return os.path.isdir(probe) and os.access(probe, os.W_OK) and can_create_in(probe)

    def ensure_dirs(self) -> None:
        try:
            for d in (self.triton_dir, self.qsa_dir, self.lock_dir):
                os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise CacheError(
                self.root, f"cannot create the cache folder ({exc.strerror})"
            ) from None

    # -- relocation (for processes that use Triton alone) --------------------------------------
    def misplaced_groups(self) -> list[str]:
        """Group files whose absolute child paths point outside their own folder."""
        if not os.path.isdir(self.triton_dir):
            return []
        bad = []
        for name in os.listdir(self.triton_dir):
            folder = os.path.join(self.triton_dir, name)
            if os.path.isdir(folder):
                bad.extend(grp for grp in tc.group_file_paths(folder) if tc.repointed_group(grp)[1])
        return bad

    def triton_view(self) -> str:
        """The folder a plain Triton process should use as TRITON_CACHE_DIR to hit this cache.

        In place: ``triton/``. Moved and writable: group files are re-pointed, then ``triton/``.
        Moved and read-only: the user's overlay, holding re-pointed copies of the group files."""
        misplaced = self.misplaced_groups()
        if not misplaced:
            return self.triton_dir
        if self.writable():
            for grp in misplaced:
                tc.repoint_group_file(grp)
            log.info(
                "re-pointed %d group files after the cache moved to %s", len(misplaced), self.root
            )
            return self.triton_dir
        overlay = overlay_folder(self)
        if overlay is None:
            raise CacheError(
                self.root,
                "moved and read-only, and no writable overlay folder for re-pointed "
                "group files; set XDG_CACHE_HOME or TMPDIR to a writable folder",
            )
        for grp in misplaced:
            target = os.path.join(
                overlay.triton_dir, os.path.basename(os.path.dirname(grp)), os.path.basename(grp)
            )
            atomic_write_json(target, tc.repointed_group(grp)[0])
        log.warning(
            "cache %s is read-only and was moved: plain Triton should use %s",
            self.root,
            overlay.triton_dir,
        )
        return overlay.triton_dir

    def stats(self) -> dict:
        entries, size = 0, 0
        for base, _, files in os.walk(self.root):
            for name in files:
                try:
                    size += os.path.getsize(os.path.join(base, name))
                except OSError:
                    pass
            if os.path.basename(base) == "entries":
                entries += sum(1 for n in files if n.endswith(".json"))
        return {"entries": entries, "bytes": size}


def overlay_folder(primary: CacheFolder) -> CacheFolder | None:
    """The writable folder this user's processes use beside a read-only ``primary``: under the
    user's cache folder, else the temp folder (named by the user id, so users never share it)."""
    name = hashlib.sha256(primary.root.encode()).hexdigest()[:16]
    bases = (
        _user_cache_dir("qsa-warmup-overlays"),
        os.path.join(tempfile.gettempdir(), f"qsa-warmup-overlays-{os.getuid()}"),
    )
    for base in filter(None, bases):
        folder = CacheFolder(os.path.join(base, name))
        try:
            folder.ensure_dirs()
        except CacheError:
            continue
        if folder.writable():
            return folder
    return None


def _user_cache_dir(name: str) -> str | None:
    try:
        import platformdirs
    except ImportError:  # a server image without it: the temp folder serves
        return None
    return platformdirs.user_cache_dir(name)


def manifest_name(config: DeploymentConfig, target: str, fingerprint: "Fingerprint") -> str:
    """The folder under ``qsa/`` that holds one (config, target, toolchain)'s manifest."""
    return f"{config.geometry_hash()}-{target}-{fingerprint.digest}"


@dataclass(frozen=True)
class Fingerprint:
    parts: dict

    # parts that depend on the target (ptxas-blackwell builds sm_100 and newer)
    TARGET_PARTS = ("ptxas", "target")

    @classmethod
    def current(cls, target: str) -> "Fingerprint":
        return cls(tc.toolchain_parts(tc.parse_target(target)))

    @functools.cached_property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.parts, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: "Fingerprint") -> list[str]:
        """Human-readable parts that differ, e.g. ``python 3.11 vs 3.12`` (self = cached)."""
        return [
            f"{name} {self.parts.get(name)} vs {other.parts.get(name)}"
            for name in sorted(set(self.parts) | set(other.parts))
            if self.parts.get(name) != other.parts.get(name)
        ]


@dataclass
class Lookup:
    """What the cache holds for one spec: ``state`` is one of :data:`STATES`; when ``ok``,
    ``folder`` is the layer whose entry passed and ``contents`` the bytes that were checked
    (what the loader loads)."""

    spec_id: str
    state: str
    reason: str = ""
    entry: dict | None = None
    folder: CacheFolder | None = None
    contents: dict = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def entry_dir(self) -> str:
        return os.path.join(self.folder.triton_dir, self.entry["folder"])


class BoundCache:
    """A deployment's cache: (config, target, toolchain fingerprint) bound once over its layers.

    ``overlay``: the folder compiles go to when ``primary`` is read-only (found with
    :func:`overlay_folder` unless given; None with ``primary`` writable). ``remote_url``: the
    shared tier to fetch from before compiling and publish to after (``remote.py``)."""

    def __init__(
        self,
        config: DeploymentConfig,
        target: str,
        primary: CacheFolder | str,
        *,
        overlay: CacheFolder | None = None,
        fingerprint: Fingerprint | None = None,
        remote_url: str | None = None,
        remote_readonly: bool = False,
        remote_budgeted: bool = False,
    ):
        self.config = config
        self.target = target
        self.primary = primary if isinstance(primary, CacheFolder) else CacheFolder(primary)
        self.overlay = overlay
        self.fingerprint = fingerprint or Fingerprint.current(target)
        # the shared tier (remote.RemoteTier), for the toolchain this object is bound to; a
        # tier dropped for another fleet's key is kept aside only to report why
        self.remote = None
        self._dropped_tier = None
        if remote_url:
            from . import knobs
            from .remote import open_remote

            self.remote = open_remote(
                remote_url,
                self.fingerprint.digest,
                key=knobs.remote_key(),
                readonly=remote_readonly,
                budgeted=remote_budgeted,
            )
        self.blocked: set[str] = set()  # primary's Triton folders that failed their checksums
        self.built: list[str] = []  # spec ids this object recorded
        self._manifest_name = manifest_name(config, target, self.fingerprint)

    # -- layers -------------------------------------------------------------------------------
    @property
    def layers(self) -> list[CacheFolder]:
        return [f for f in (self.primary, self.overlay) if f is not None]

    @functools.cached_property
    def write_folder(self) -> CacheFolder | None:
        """Where builds go: the primary if this process can write it, else the overlay."""
        if self.primary.writable():
            return self.primary
        return self.overlay if self.overlay is not None and self.overlay.writable() else None

    def manifest_dir(self, folder: CacheFolder) -> str:
        return os.path.join(folder.qsa_dir, self._manifest_name)

    def entry_path(self, folder: CacheFolder, spec_id: str) -> str:
        return os.path.join(self.manifest_dir(folder), "entries", f"{spec_id}.json")

    def plan_memo_path(self, folder: CacheFolder, source_digest: str) -> str:
        return os.path.join(folder.plans_dir, f"{self._manifest_name}-{source_digest}.json")

    # -- the plan ---------------------------------------------------------------------------------
    def plan(self, *, offline: bool):
        """The plan, from a memo in a layer written by an earlier start or prebuild for the same
        config, target, toolchain, kernel source and binding knobs, else from the shared tier
        (signed memos only), else computed; a memo that does not decode is ignored. What is not
        read locally is memoized in the first layer that takes the write (and published)."""
        from .planner import build_plan
        from .qsa.digest import plan_source_digest

        if isinstance(self.config, DeploymentConfig):
            digest, remote = plan_source_digest(), self.remote
        elif hasattr(self.config, "plan_digest"):  # a recording: memoized locally only
            digest, remote = self.config.plan_digest(), None
        else:  # a family deployment: its binder probes are few
            return self.config.build_plan(self.target, offline=offline)
        memo_name = os.path.basename(self.plan_memo_path(self.primary, digest))
        sources = [
            (f.plans_dir, lambda f=f: read_json(self.plan_memo_path(f, digest)))
            for f in self.layers
        ]
        if remote is not None:
            sources.append(("the shared tier", lambda: remote.fetch_plan(memo_name)))
        for where, read in sources:
            memo = read()
            if isinstance(memo, list):
                try:
                    plan = build_plan(self.config, self.target, offline=offline, memo=memo)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("ignoring unusable plan memo in %s (%s)", where, exc)
                    continue
                if where == "the shared tier":
                    self._memoize(plan, digest)
                return plan
        plan = build_plan(self.config, self.target, offline=offline)
        self._memoize(plan, digest)
        if remote is not None:
            remote.publish_plan(memo_name, plan.to_memo())
        return plan

    def _memoize(self, plan, digest: str) -> None:
        for folder in [self.write_folder] if self.write_folder else []:
            try:
                atomic_write_json(self.plan_memo_path(folder, digest), plan.to_memo())
            except OSError:
                pass  # a full disk: the next start plans again

    # -- verify ---------------------------------------------------------------------------------
    @functools.cached_property
    def stale_reason(self) -> str | None:
        """How the closest manifest of another toolchain for this config and target differs from
        this one (e.g. ``python 3.11 vs 3.12``), or None when no other toolchain built it."""
        prefix = f"{self.config.geometry_hash()}-{self.target}-"
        others = []
        for folder in self.layers:
            try:
                names = sorted(os.listdir(folder.qsa_dir))
            except OSError:
                continue
            for name in names:
                if name.startswith(prefix) and name != self._manifest_name:
                    data = read_json(os.path.join(folder.qsa_dir, name, "manifest.json"))
                    if isinstance(data, dict) and isinstance(data.get("fingerprint"), dict):
                        others.append(Fingerprint(data["fingerprint"]))
        if not others:
            return None
        return "; ".join(
            min(others, key=lambda o: len(o.differences(self.fingerprint))).differences(
                self.fingerprint
            )
        )

    def lookup(self, spec) -> Lookup:
        """The verified entry of ``spec`` in the first layer that has one, or why none does:
        ``missing`` (never built, or built from other source: rebuilt quietly), ``corrupt``
        (checksum, unreadable entry or file: never loaded), ``stale`` (built by another
        toolchain only, naming what differs). A primary folder that fails is blocked, so
        Triton never loads it either."""
        found = []
        for folder in self.layers:
            result = self._verify(folder, spec)
            if result.ok:
                if folder is self.primary:
                    self.blocked.discard(result.entry["folder"])  # rebuilt since it failed
                return result
            if result.state == "corrupt" and folder is self.primary and result.entry:
                self.blocked.add(result.entry["folder"])
            found.append(result)
        result = next((r for r in found if r.state == "corrupt"), found[0])
        if result.state == "missing" and result.entry is None and self.stale_reason is not None:
            return Lookup(spec.id, "stale", self.stale_reason)
        return result

    def _verify(self, folder: CacheFolder, spec, entry_path: str | None = None) -> Lookup:
        entry = read_json(entry_path or self.entry_path(folder, spec.id))
        if entry is None:
            return Lookup(spec.id, "missing", "not built")
        if (
            entry is UNREADABLE
            or not isinstance(entry, dict)
            or not isinstance(entry.get("files"), dict)
            or not isinstance(entry.get("folder"), str)
            or os.sep in entry["folder"]
            or entry["folder"] in ("", ".", "..")
        ):
            return Lookup(spec.id, "corrupt", "manifest entry unreadable")
        if entry.get("kernel") != spec.kernel or entry.get("key") != spec.key:
            return Lookup(spec.id, "missing", "entry was built for another specialization", entry)
        if spec.compile_hash and entry.get("hash") != spec.compile_hash:
            return Lookup(
                spec.id,
                "missing",
                "entry was built from other kernel source or compile options",
                entry,
            )
        entry_dir = os.path.join(folder.triton_dir, entry["folder"])
        if not os.path.isdir(entry_dir):
            return Lookup(spec.id, "missing", f"triton/{entry['folder']} is gone", entry)
        if not tc.group_file_paths(entry_dir):
            return Lookup(
                spec.id, "corrupt", f"triton/{entry['folder']}: group file missing", entry
            )
        problem, contents = checked_files(entry_dir, entry["files"])
        if problem:
            return Lookup(spec.id, "corrupt", problem, entry)
        return Lookup(spec.id, "ok", entry=entry, folder=folder, contents=contents)

    def adopt_from_sibling(self, spec) -> bool:
        """Give ``spec`` the verified entry another manifest of the write folder holds for it
        (another recording or config built by this toolchain for this target that planned the
        same kernel), so an overlapping or merged plan compiles only what is new. The entry is
        checked as this manifest's own would be (kernel, key, compile hash, every file's
        checksum); one that fails is left alone."""
        folder = self.write_folder
        if folder is None:
            return False
        suffix = f"-{self.target}-{self.fingerprint.digest}"
        try:
            names = sorted(os.listdir(folder.qsa_dir))
        except OSError:
            return False
        for name in names:
            if name == self._manifest_name or not name.endswith(suffix):
                continue
            path = os.path.join(folder.qsa_dir, name, "entries", f"{spec.id}.json")
            if not os.path.isfile(path):
                continue
            found = self._verify(folder, spec, path)
            if found.ok:
                atomic_write_json(self.entry_path(folder, spec.id), found.entry)
                return True
        return False

    def loadable(self, lookup: Lookup) -> Lookup:
        """``lookup``, or an ``unloadable`` one when the kernel needs more shared memory or
        threads than one block of the target has."""
        limits = tc.target_limits(tc.parse_target(self.target).arch)
        if not lookup.ok or limits is None:
            return lookup
        max_shared, max_threads = limits
        entry = lookup.entry
        if entry.get("shared", 0) > max_shared:
            return Lookup(
                lookup.spec_id,
                "unloadable",
                f"needs {entry['shared']} B shared memory, {self.target} allows {max_shared} B",
                entry,
            )
        if entry.get("threads", 0) > max_threads:
            return Lookup(
                lookup.spec_id,
                "unloadable",
                f"needs {entry['threads']} threads, {self.target} allows {max_threads}",
                entry,
            )
        return lookup

    def check(self, plan) -> list[Lookup]:
        """Every planned spec's state, as ``qsa-warmup check`` reports it."""
        return [self.loadable(self.lookup(spec)) for spec in plan.specs]

    # -- record ---------------------------------------------------------------------------------
    def write_manifest(self, spec_ids) -> None:
        folder = self._require_write_folder()
        atomic_write_json(
            os.path.join(self.manifest_dir(folder), "manifest.json"),
            {
                "config": self.config.to_dict(),
                "target": self.target,
                "fingerprint": self.fingerprint.parts,
                "specs": list(spec_ids),
            },
        )

    def record(self, spec, compiled) -> dict:
        """Checksum the files Triton just wrote for ``spec`` (in the write folder) and write the
        spec's entry (atomically, after all of its files exist)."""
        folder = self._require_write_folder()
        info = tc.compiled_info(compiled)
        entry_dir = os.path.join(folder.triton_dir, tc.file_cache_dirname(info.hash))
        files = {}
        for name in sorted(os.listdir(entry_dir)):
            path = os.path.join(entry_dir, name)
            if name.startswith("__grp__") or name.startswith("tmp.") or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                files[name] = sha256_bytes(f.read())
        entry = {
            "spec": spec.id,
            "kernel": spec.kernel,
            "key": spec.key,
            "hash": info.hash,
            "folder": os.path.basename(entry_dir),
            "files": files,
            "shared": info.shared,
            "threads": info.threads,
            "num_warps": info.num_warps,
            "target": info.target,
        }
        atomic_write_json(self.entry_path(folder, spec.id), entry)
        self.built.append(spec.id)
        if self.remote is not None:  # inside build_turn: published before its lock is let go
            self.remote.publish(spec, entry, entry_dir)
        return entry

    # -- the shared tier: the layer behind the folders ------------------------------------------
    # What a folder lacks is asked of the tier, verified and kept in the write folder; what is
    # compiled here is published to it. Callers use these methods, never the client itself.
    def fill_from_tier(self, specs) -> set[str]:
        """Ids of ``specs`` the shared tier held, now fetched into the write folder (verified;
        two round trips for any number). Nothing without a tier or a write folder; a tier
        signed by another fleet's key is dropped from this cache, so nothing is published
        there either (:meth:`tier_problems` says so)."""
        tier = self.remote
        if tier is None or not specs or self.write_folder is None:
            return set()
        fetched = {spec.id for spec in tier.fetch(self, list(specs))}
        if tier.key_mismatch:
            self.remote = None
            self._dropped_tier = tier
        return fetched

    @contextlib.contextmanager
    def build_turn(self, spec, wait: float):
        """Around one compile of ``spec`` (under its local lock): yields True when another host
        built it meanwhile (now fetched here), else False, holding the tier's lock for it, if
        any, until :meth:`record` has published the build."""
        if self.remote is None:
            yield False
            return
        with self.remote.compile_turn(self, spec, wait) as fetched:
            if not fetched:
                self.remote.missed()
            yield fetched

    def tier_problems(self) -> list[str]:
        """What the tier did wrong so far (down, slow, bad bytes, another fleet's key), each once,
        prefixed with the tier's name."""
        tier = self.remote or self._dropped_tier
        if tier is None:
            return []
        said = [f"shared tier {tier.settings.display}: {m}" for m in tier.problems]
        if tier.key_mismatch:
            said.append(f"shared tier {tier.settings.display} not used: {tier.key_mismatch}")
        return said

    def tier_counters(self) -> dict:
        """The tier's counters in this process (hits, misses, bytes, ...); {} without one."""
        import dataclasses

        return dataclasses.asdict(self.remote.stats) if self.remote is not None else {}

    def tier_url_for_builds(self) -> str | None:
        """The tier's URL for a build in another process, unless this process found it down
        (too slow for a start is still fine for a build)."""
        tier = self.remote
        return tier.settings.as_url() if tier is not None and tier.usable_for_builds else None

    def tier_key_problem(self) -> str | None:
        """Why the tier's fleet key does not fit this process's (asks the tier), else None."""
        return self.remote.key_problem() if self.remote is not None else None

    def tier_bad(self) -> dict:
        """Spec id -> why the tier's copy failed verification here (not fetched again)."""
        return self.remote.bad if self.remote is not None else {}

    def mark_tier_bad(self, bad: dict) -> None:
        if self.remote is not None:
            self.remote.bad.update(bad)

    def add_tier_counts(self, counters: dict, problems=()) -> None:
        """Fold another process's tier counters and problems (a build worker's, a child
        prebuild's) into this one's."""
        import dataclasses

        tier = self.remote
        if tier is None:
            return
        fields = set(dataclasses.asdict(tier.stats))
        tier.stats.add({k: v for k, v in counters.items() if k in fields})
        tier.problems += [p for p in problems if p not in tier.problems]

    def tier_report(self, *, with_problems: bool = False) -> dict | None:
        """The tier's URL, mode and counters (and problems) for a report; None without one."""
        tier = self.remote
        if tier is None:
            return None
        report = {
            "url": tier.settings.display,
            "readonly": tier.settings.readonly,
            **self.tier_counters(),
        }
        if with_problems:
            report["problems"] = list(tier.problems)
        return report

    def purge(self, lookup: Lookup, folder: CacheFolder) -> None:
        """Remove the Triton files a damaged entry names (group file first: Triton treats a
        folder without its group file as a miss)."""
        entry_dir = os.path.join(folder.triton_dir, lookup.entry["folder"])
        if os.path.isdir(entry_dir):
            for grp in tc.group_file_paths(entry_dir):
                os.unlink(grp)
        shutil.rmtree(entry_dir, ignore_errors=True)

    def _require_write_folder(self) -> CacheFolder:
        if self.write_folder is None:
            raise CacheError(self.primary.root, "read-only, and no writable overlay")
        return self.write_folder
