"""The persistent kernel cache: Triton's file cache plus qsa manifests, relocatable.

Layout under the cache folder::

    triton/                                Triton's file cache (TRITON_CACHE_DIR points here)
      <base32 compile hash>/...            one folder per compiled kernel, Triton's own files
    qsa/<geometry>-<target>-<toolchain>/   one manifest per (config, target, toolchain)
      manifest.json                        config, fingerprint parts, planned spec ids
      entries/<spec id>.json               Triton key, compile hash, sha256 of every file
    locks/<spec key digest>.lock           compile-once locks (filelock)

Every file qsa writes goes to a temp file in the same folder and is then ``os.replace``d, so a
reader sees the old or the new file, never a part. A spec entry is written only after all of
its Triton files exist, and it names their checksums, so a truncated or flipped file is found.
Group files are checked by name, not by content: their absolute paths are re-pointed when the
folder moves (see :meth:`KernelCache.triton_view`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field

from . import triton_compat as tc
from .config import DeploymentConfig
from .errors import CacheError

__all__ = ["KernelCache", "Fingerprint", "EntryStatus", "atomic_write_json", "current_fingerprint", "TARGET_LIMITS"]

log = logging.getLogger(__name__)

# Per-block limits of each target: (max dynamic shared memory bytes, max threads).
TARGET_LIMITS = {80: (166912, 1024), 86: (101376, 1024), 87: (166912, 1024), 89: (101376, 1024),
                 90: (232448, 1024), 100: (232448, 1024), 103: (232448, 1024), 120: (101376, 1024)}


def atomic_write_json(path: str, data) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"__unreadable__": True}


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    parts: dict

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.parts, sort_keys=True).encode()).hexdigest()[:16]

    def differences(self, other: "Fingerprint") -> list[str]:
        """Human-readable parts that differ, e.g. ``python 3.11 vs 3.12`` (self = cached)."""
        out = []
        for name in sorted(set(self.parts) | set(other.parts)):
            a, b = self.parts.get(name), other.parts.get(name)
            if a != b:
                out.append(f"{name} {a} vs {b}")
        return out


def current_fingerprint(target: str) -> Fingerprint:
    return Fingerprint(tc.toolchain_parts(tc.parse_target(target)))


@dataclass
class EntryStatus:
    spec_id: str
    state: str  # ok | missing | corrupt | stale | unloadable
    reason: str = ""
    extra: dict = field(default_factory=dict)


class KernelCache:
    """One cache folder. Paths are resolved when the object is made, never at import time."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.triton_dir = os.path.join(self.root, "triton")
        self.qsa_dir = os.path.join(self.root, "qsa")
        self.lock_dir = os.path.join(self.root, "locks")

    # -- layout -------------------------------------------------------------------------
    def manifest_dir(self, cfg: DeploymentConfig, target: str, fp: Fingerprint) -> str:
        return os.path.join(self.qsa_dir, f"{cfg.geometry_hash()}-{target}-{fp.digest}")

    def entry_path(self, cfg, target, fp, spec_id) -> str:
        return os.path.join(self.manifest_dir(cfg, target, fp), "entries", f"{spec_id}.json")

    def lock_path(self, key_digest: str) -> str:
        return os.path.join(self.lock_dir, f"{key_digest}.lock")

    def writable(self) -> bool:
        probe = self.root
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        return os.access(probe, os.W_OK) and _can_create(probe)

    def ensure_dirs(self) -> None:
        try:
            for d in (self.triton_dir, self.qsa_dir, self.lock_dir):
                os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise CacheError(self.root, f"cannot create the cache folder ({exc.strerror})") from None

    # -- manifests ------------------------------------------------------------------------
    def write_manifest(self, cfg, target, fp, spec_ids) -> None:
        atomic_write_json(os.path.join(self.manifest_dir(cfg, target, fp), "manifest.json"), {
            "config": cfg.to_dict(), "target": target, "fingerprint": fp.parts, "specs": list(spec_ids)})

    def other_fingerprints(self, cfg, target, fp) -> list[Fingerprint]:
        """Fingerprints of manifests for the same config and target built by other toolchains."""
        prefix = f"{cfg.geometry_hash()}-{target}-"
        found = []
        if not os.path.isdir(self.qsa_dir):
            return found
        for name in sorted(os.listdir(self.qsa_dir)):
            if name.startswith(prefix) and name != f"{prefix}{fp.digest}":
                data = _read_json(os.path.join(self.qsa_dir, name, "manifest.json"))
                if data and "fingerprint" in data:
                    found.append(Fingerprint(data["fingerprint"]))
        return found

    def stale_reason(self, cfg, target, fp) -> str | None:
        """How the closest manifest of another toolchain differs from ``fp`` (e.g.
        ``python 3.11 vs 3.12``), or None when no other toolchain built this config."""
        others = self.other_fingerprints(cfg, target, fp)
        if not others:
            return None
        return "; ".join(min(others, key=lambda o: len(o.differences(fp))).differences(fp))

    def record_entry(self, cfg, target, fp, spec, compiled) -> dict:
        """Checksum the compiled kernel's files and write the spec's entry (atomically)."""
        info = tc.compiled_info(compiled)
        folder = os.path.join(self.triton_dir, tc.file_cache_dirname(info.hash))
        files = {}
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.startswith("__grp__") or name.startswith("tmp.") or not os.path.isfile(path):
                continue
            files[name] = sha256_file(path)
        entry = {"spec": spec.id, "kernel": spec.kernel, "key": spec.key, "hash": info.hash,
                 "folder": os.path.basename(folder), "files": files, "shared": info.shared,
                 "threads": info.threads, "num_warps": info.num_warps, "target": info.target}
        atomic_write_json(self.entry_path(cfg, target, fp, spec.id), entry)
        return entry

    def read_entry(self, cfg, target, fp, spec_id):
        return _read_json(self.entry_path(cfg, target, fp, spec_id))

    def verify_entry(self, entry, spec, contents: dict | None = None) -> EntryStatus:
        """ok / missing / corrupt for one entry against its Triton files (no toolchain check).
        ``contents``, if given, receives each verified file's bytes by path (the loader then
        reads nothing again, so what it loads is what was checked)."""
        if entry is None:
            return EntryStatus(spec.id, "missing", "not built")
        if entry.get("__unreadable__") or "files" not in entry:
            return EntryStatus(spec.id, "corrupt", "manifest entry unreadable")
        if entry.get("kernel") != spec.kernel or entry.get("key") != spec.key:
            return EntryStatus(spec.id, "missing", "entry was built for another specialization")
        if getattr(spec, "compile_hash", "") and entry.get("hash") != spec.compile_hash:
            return EntryStatus(spec.id, "missing", "entry was built from other kernel source or compile options")
        folder = os.path.join(self.triton_dir, entry["folder"])
        if not os.path.isdir(folder):
            return EntryStatus(spec.id, "missing", f"triton/{entry['folder']} is gone")
        if not tc.group_file_paths(folder):
            return EntryStatus(spec.id, "corrupt", f"triton/{entry['folder']}: group file missing")
        read = {}
        for name, digest in entry["files"].items():
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return EntryStatus(spec.id, "corrupt", f"{name} missing")
            if hashlib.sha256(data).hexdigest() != digest:
                return EntryStatus(spec.id, "corrupt", f"{name} checksum mismatch")
            read[path] = data
        if contents is not None:
            contents.update(read)
        return EntryStatus(spec.id, "ok", extra={"shared": entry.get("shared"), "threads": entry.get("threads")})

    def loadable(self, entry, target: str) -> EntryStatus | None:
        """An ``unloadable`` status when the kernel's resource needs exceed the target's limits."""
        arch = tc.parse_target(target).arch
        limits = TARGET_LIMITS.get(arch)
        if limits is None or entry is None:
            return None
        max_shared, max_threads = limits
        if entry.get("shared", 0) > max_shared:
            return EntryStatus(entry["spec"], "unloadable",
                               f"needs {entry['shared']} B shared memory, {target} allows {max_shared} B")
        if entry.get("threads", 0) > max_threads:
            return EntryStatus(entry["spec"], "unloadable",
                               f"needs {entry['threads']} threads, {target} allows {max_threads}")
        return None

    # -- relocation -------------------------------------------------------------------------
    def misplaced_groups(self) -> list[str]:
        """Group files whose absolute child paths point outside their own folder."""
        bad = []
        if not os.path.isdir(self.triton_dir):
            return bad
        for name in os.listdir(self.triton_dir):
            folder = os.path.join(self.triton_dir, name)
            if not os.path.isdir(folder):
                continue
            bad.extend(grp for grp in tc.group_file_paths(folder) if tc.repointed_group(grp)[1])
        return bad

    def triton_view(self, overlay_root: str | None = None) -> str:
        """The folder a plain Triton process should use as TRITON_CACHE_DIR to hit this cache.

        In place: ``triton/``. Moved and writable: group files are re-pointed, then ``triton/``.
        Moved and read-only: an overlay of re-pointed group files under ``overlay_root``."""
        misplaced = self.misplaced_groups()
        if not misplaced:
            return self.triton_dir
        if self.writable():
            for grp in misplaced:
                tc.repoint_group_file(grp)
            log.info("re-pointed %d group files after the cache moved to %s", len(misplaced), self.root)
            return self.triton_dir
        if overlay_root is None:
            raise CacheError(self.root, "moved and read-only; an overlay folder is needed for plain Triton")
        overlay = os.path.join(overlay_root, hashlib.sha256(self.root.encode()).hexdigest()[:16])
        for grp in misplaced:
            target = os.path.join(overlay, os.path.basename(os.path.dirname(grp)), os.path.basename(grp))
            atomic_write_json(target, tc.repointed_group(grp)[0])
        log.warning("cache %s is read-only and was moved: plain Triton should use the overlay %s", self.root, overlay)
        return overlay

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


def _can_create(folder: str) -> bool:
    # os.access says nothing of read-only mounts for root: try it.
    try:
        fd, path = tempfile.mkstemp(prefix=".probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(path)
    return True
