"""Bundles: one file that carries a cache's builds to other machines (a CI artifact, an image
layer), verified in full before anything of it becomes visible in the receiving cache.

A bundle is a tar archive (zstd-compressed when ``zstandard`` is installed, else gzip; import
reads either) whose first member, ``bundle.json``, lists every other member with its sha256,
the deployments it holds (config, target, toolchain fingerprint, spec ids) and a digest of the
whole list (optionally an HMAC of that digest under ``QSA_WARMUP_REMOTE_KEY``). The other
members keep the cache's own layout::

    qsa/<manifest>/manifest.json, qsa/<manifest>/entries/<spec>.json
    triton/<compile hash>/<file>          (group files are rewritten for the receiving folder)

Import refuses, before writing anything: a member that is not a regular file, a name that is
absolute, holds ``..`` or lies outside that layout, a member not listed or listed and absent, a
checksum or digest that does not match, an entry whose files the bundle does not carry, and
(unless forced) a deployment built by another toolchain, naming the part that differs. It
stages the files in a temp folder inside the cache, then moves them in: Triton's files first,
each entry after its files, each manifest last, so an interrupted import leaves only complete
entries. Importing the same bundle again changes nothing.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import hmac
import io
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import time
from typing import BinaryIO, Iterator

from . import triton_compat as tc
from ._fs import atomic_write_json, checked_files, read_json, sha256_bytes
from .cache import CacheFolder, Fingerprint, manifest_name
from .errors import BundleError, CacheError, ConfigError
from .qsa.config import DeploymentConfig
from .recording import plan_source_from_dict

__all__ = [
    "export_bundle",
    "import_bundle",
    "select_manifests",
    "manifest_fingerprints",
    "ExportReport",
    "ImportReport",
    "BUNDLE_FORMAT",
    "default_compression",
]

log = logging.getLogger(__name__)

BUNDLE_FORMAT = 1
INDEX = "bundle.json"
_ZSTD_MAGIC, _GZIP_MAGIC = b"\x28\xb5\x2f\xfd", b"\x1f\x8b"
# a config's geometry hash, a recording's (``rec`` and hex) or a family deployment's (``fam``)
_MANIFEST_DIR = re.compile(r"^(?:rec|fam)?[0-9a-f]{8,64}-sm_\d+a?-[0-9a-f]{16}$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_PLAN_MEMO = re.compile(
    r"^(?:rec|fam)?[0-9a-f]{8,64}-sm_\d+a?-[0-9a-f]{16}-[0-9a-f]{16}-[0-9a-f]{8}\.json$"
)
_MAX_INDEX_BYTES = 64 << 20


@dataclasses.dataclass
class ExportReport:
    path: str
    digest: str
    files: int
    bytes: int
    compression: str
    signed: bool
    deployments: list  # [{"manifest", "target", "specs", "fingerprint"}]


@dataclasses.dataclass
class ImportReport:
    bundle: str
    digest: str
    cache_dir: str
    added: int  # files moved in
    present: int  # files the cache already held, byte for byte
    deployments: list


# -- export ---------------------------------------------------------------------------------


def _manifest(folder: CacheFolder, name: str) -> dict | None:
    data = read_json(os.path.join(folder.qsa_dir, name, "manifest.json"))
    ok = isinstance(data, dict) and all(k in data for k in ("config", "target", "specs"))
    return data if ok else None


def select_manifests(
    folder: CacheFolder, config: DeploymentConfig | None, targets: list[str] | None
) -> list[str]:
    """Manifest folders to export. With ``targets``: this toolchain's build of ``config`` for
    each (BundleError naming one that is missing). Else every manifest in the cache, of
    ``config`` only when given."""
    if targets:
        names = []
        for target in targets:
            name = manifest_name(config, target, Fingerprint.current(target))
            if _manifest(folder, name) is None:
                raise CacheError(
                    folder.root,
                    f"holds no build of this config for {target} by this toolchain; "
                    f"run qsa-warmup prebuild --target {target} first",
                )
            names.append(name)
        return names
    try:
        names = sorted(os.listdir(folder.qsa_dir))
    except OSError:
        names = []
    prefix = f"{config.geometry_hash()}-" if config else ""
    names = [n for n in names if n.startswith(prefix) and _manifest(folder, n) is not None]
    if not names:
        raise CacheError(folder.root, "holds no manifest to export; run qsa-warmup prebuild")
    return names


def manifest_fingerprints(folder: CacheFolder, names: list[str]) -> list[tuple[str, dict]]:
    """(target, fingerprint parts) of each manifest."""
    return [(m["target"], m.get("fingerprint", {})) for m in (_manifest(folder, n) for n in names)]


def _deployment_files(folder: CacheFolder, name: str) -> Iterator[tuple[str, str]]:
    """(member name, path) of every file of one manifest, each entry's files verified."""
    manifest = _manifest(folder, name)
    yield f"qsa/{name}/manifest.json", os.path.join(folder.qsa_dir, name, "manifest.json")
    for spec_id in manifest["specs"]:
        entry_path = os.path.join(folder.qsa_dir, name, "entries", f"{spec_id}.json")
        entry = read_json(entry_path)
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
            raise CacheError(
                folder.root,
                f"{manifest['target']}: {spec_id} is not built (or its entry is damaged); "
                "run qsa-warmup prebuild to complete the cache before exporting it",
            )
        entry_dir = os.path.join(folder.triton_dir, os.path.basename(entry["folder"]))
        problem, _ = checked_files(entry_dir, entry["files"])
        if problem:
            raise CacheError(
                folder.root,
                f"{manifest['target']}: {spec_id}: {problem}; run qsa-warmup prebuild to "
                "rebuild it before exporting",
            )
        yield f"qsa/{name}/entries/{spec_id}.json", entry_path
        base = f"triton/{entry['folder']}"
        for file_name in sorted(entry["files"]):
            yield f"{base}/{file_name}", os.path.join(entry_dir, file_name)
        for grp in sorted(n for n in os.listdir(entry_dir) if n.startswith("__grp__")):
            yield f"{base}/{grp}", os.path.join(entry_dir, grp)
    # the plan memos of this manifest: a receiving host starts without planning
    try:
        memos = sorted(n for n in os.listdir(folder.plans_dir) if n.startswith(f"{name}-"))
    except OSError:
        memos = []
    for memo in memos:
        if _PLAN_MEMO.match(memo) and isinstance(
            read_json(os.path.join(folder.plans_dir, memo)), list
        ):
            yield f"plans/{memo}", os.path.join(folder.plans_dir, memo)


def _digest(files: dict[str, str]) -> str:
    return sha256_bytes(json.dumps(files, sort_keys=True).encode())


def _signature(key: bytes, digest: str) -> str:
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def _compressor(compression: str, raw: BinaryIO):
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=10, threads=-1).stream_writer(raw, closefd=False)
    return gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0)


def default_compression() -> str:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return "gzip"
    return "zstd"


def export_bundle(
    folder: CacheFolder,
    names: list[str],
    out_path: str,
    *,
    key: bytes | None = None,
    compression: str | None = None,
) -> ExportReport:
    """Write the manifests ``names`` of ``folder`` with every file they name to ``out_path``
    (atomically: a temp file beside it, then renamed)."""
    compression = compression or default_compression()
    members: dict[str, bytes] = {}
    for name in names:
        for member, path in _deployment_files(folder, name):
            with open(path, "rb") as f:
                members[member] = f.read()
    files = {m: sha256_bytes(data) for m, data in sorted(members.items())}
    digest = _digest(files)
    deployments = []
    for name in names:
        manifest = _manifest(folder, name)
        deployments.append(
            {
                "manifest": name,
                "config": manifest["config"],
                "target": manifest["target"],
                "fingerprint": manifest.get("fingerprint", {}),
                "specs": len(manifest["specs"]),
            }
        )
    index = {
        "format": BUNDLE_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "deployments": deployments,
        "files": files,
        "digest": digest,
    }
    if key:
        index["signature"] = _signature(key, digest)
    out_path = os.path.abspath(out_path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-bundle-", dir=os.path.dirname(out_path))
    try:
        with os.fdopen(fd, "wb") as raw:
            with _compressor(compression, raw) as stream:
                with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    _add(tar, INDEX, json.dumps(index, indent=1, sort_keys=True).encode())
                    for member, data in sorted(members.items()):
                        _add(tar, member, data)
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return ExportReport(
        out_path,
        digest,
        len(files),
        os.path.getsize(out_path),
        compression,
        bool(key),
        [{k: d[k] for k in ("manifest", "target", "specs", "fingerprint")} for d in deployments],
    )


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


# -- import ---------------------------------------------------------------------------------


def _open_stream(path: str, raw: BinaryIO):
    head = raw.read(4)
    raw.seek(0)
    if head.startswith(_ZSTD_MAGIC):
        try:
            import zstandard
        except ImportError:
            raise BundleError(
                path, "is zstd-compressed; pip install zstandard to import it"
            ) from None
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
    if head.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    raise BundleError(path, "is not a qsa-warmup bundle (neither zstd nor gzip)")


def _member_path(path: str, member: tarfile.TarInfo) -> str:
    """The member's name, refused unless a regular file at a plain path inside the layout."""
    name = member.name
    if not member.isfile():
        kind = "link" if member.issym() or member.islnk() else "device or special file"
        if member.isdir():
            kind = "folder"
        raise BundleError(path, f"member {name!r} is a {kind}; a bundle holds regular files only")
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise BundleError(path, f"member {name!r} is not a plain relative path; refused")
    if not all(_SAFE_NAME.match(p) for p in parts):
        raise BundleError(path, f"member {name!r} has characters a cache never uses; refused")
    in_manifest = len(parts) >= 3 and parts[0] == "qsa" and _MANIFEST_DIR.match(parts[1])
    shape_ok = (
        (len(parts) == 2 and parts[0] == "plans" and _PLAN_MEMO.match(parts[1]))
        or (len(parts) == 3 and parts[0] == "triton")
        or (in_manifest and len(parts) == 3 and parts[2] == "manifest.json")
        or (
            in_manifest and len(parts) == 4 and parts[2] == "entries" and parts[3].endswith(".json")
        )
    )
    if not shape_ok:
        raise BundleError(path, f"member {name!r} lies outside a cache's layout; refused")
    return name


def _read_index(path: str, tar: tarfile.TarFile, key: bytes | None) -> dict:
    first = tar.next()
    if first is None or first.name != INDEX or not first.isfile():
        raise BundleError(path, f"does not start with {INDEX}: not a qsa-warmup bundle")
    if first.size > _MAX_INDEX_BYTES:
        raise BundleError(path, f"{INDEX} is {first.size} bytes; refused")
    try:
        index = json.loads(tar.extractfile(first).read())
    except ValueError:
        raise BundleError(path, f"{INDEX} does not decode: the bundle is damaged") from None
    if not isinstance(index, dict) or index.get("format") != BUNDLE_FORMAT:
        found = index.get("format") if isinstance(index, dict) else None
        raise BundleError(path, f"bundle format {found!r}; this qsa-warmup reads {BUNDLE_FORMAT}")
    files, deployments = index.get("files"), index.get("deployments")
    if not isinstance(files, dict) or not isinstance(deployments, list):
        raise BundleError(path, f"{INDEX} lacks its file list: the bundle is damaged")
    if _digest(files) != index.get("digest"):
        raise BundleError(path, "digest does not match its file list: the bundle is damaged")
    if key is not None:
        signature = index.get("signature")
        if not isinstance(signature, str) or not hmac.compare_digest(
            signature, _signature(key, index["digest"])
        ):
            what = "is not signed" if signature is None else "is signed with another key"
            raise BundleError(
                path,
                f"{what} (QSA_WARMUP_REMOTE_KEY is set here); export it with the same key",
            )
    return index


def _stage(path: str, tar: tarfile.TarFile, index: dict, staging: str) -> None:
    """Every member into ``staging``, each checked against the index as it streams."""
    expected = index["files"]
    seen = set()
    while (member := tar.next()) is not None:
        name = _member_path(path, member)
        if name not in expected:
            raise BundleError(path, f"member {name} is not in {INDEX}: the bundle is damaged")
        if name in seen:
            raise BundleError(path, f"member {name} appears twice; refused")
        seen.add(name)
        target = os.path.join(staging, *name.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        h = hashlib.sha256()
        source = tar.extractfile(member)
        with open(target, "wb") as out:
            while chunk := source.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != expected[name]:
            raise BundleError(path, f"{name} checksum mismatch: the bundle is damaged")
    missing = sorted(set(expected) - seen)
    if missing:
        raise BundleError(
            path, f"{len(missing)} listed files are absent (first: {missing[0]}): truncated"
        )


def _check_deployments(path: str, index: dict, staging: str, force: bool) -> list[dict]:
    """Each deployment consistent (its manifest, entries and their files all carried) and,
    unless ``force``, built by this toolchain."""
    files = index["files"]
    checked = []
    for dep in index["deployments"]:
        try:
            config = plan_source_from_dict(dep["config"], source="bundle config")
            fingerprint = Fingerprint(dict(dep["fingerprint"]))
            name, target = dep["manifest"], dep["target"]
            consistent = name == manifest_name(config, target, fingerprint)
        except (ConfigError, KeyError, TypeError, ValueError):  # RecordingError too
            consistent = False
        if not consistent or f"qsa/{name}/manifest.json" not in files:
            raise BundleError(path, "a deployment's description does not match its manifest")
        manifest = read_json(os.path.join(staging, "qsa", name, "manifest.json"))
        if not isinstance(manifest, dict) or manifest.get("fingerprint") != fingerprint.parts:
            raise BundleError(path, f"{target}: manifest does not match {INDEX}")
        for spec_id in manifest.get("specs", []):
            _check_entry(path, staging, files, name, spec_id)
        _require_same_toolchain(path, target, fingerprint, force)
        checked.append({"manifest": name, "target": target, "specs": len(manifest["specs"])})
    names = {d["manifest"] for d in checked}
    for member in (m for m in files if m.startswith("plans/")):
        memo = read_json(os.path.join(staging, *member.split("/")))
        owner = member.split("/")[1].rsplit("-", 2)[0]
        if owner not in names or not isinstance(memo, list):
            raise BundleError(path, f"{member} is not a plan of a deployment it carries")
    return checked


def _known(target: str) -> bool:
    try:
        tc.parse_target(target)
    except ValueError:
        return False
    return True


def _check_entry(path: str, staging: str, files: dict, name: str, spec_id: str) -> None:
    member = f"qsa/{name}/entries/{spec_id}.json"
    entry = read_json(os.path.join(staging, *member.split("/"))) if member in files else None
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
        raise BundleError(path, f"{member} is absent or does not decode")
    folder = entry.get("folder")
    if not isinstance(folder, str) or not _SAFE_NAME.match(folder) or folder in (".", ".."):
        raise BundleError(path, f"{member} names an unsafe folder {folder!r}")
    for file_name, digest in entry["files"].items():
        if files.get(f"triton/{folder}/{file_name}") != digest:
            raise BundleError(path, f"{member}: {file_name} is not carried with its checksum")


def _require_same_toolchain(path: str, target: str, fingerprint: Fingerprint, force: bool):
    """BundleError naming each part where the bundle's toolchain differs from this one's
    (unless ``force``). Computing this one's also leaves the toolchain memo in the receiving
    folder, so the first start after an import does not hash Triton's library."""
    try:
        here = Fingerprint.current(target)
    except ValueError as exc:
        if force:
            return
        raise BundleError(path, f"{target}: {exc}; or import with --force") from None
    differences = fingerprint.differences(here)
    if differences and not force:
        raise BundleError(
            path,
            f"{target} was built by another toolchain ({'; '.join(differences)}, bundle vs "
            "here): nothing would hit; build it where the toolchain matches (prebuild "
            "--expect-fingerprint), or import with --force",
        )


def _install(staging: str, folder: CacheFolder, index: dict) -> tuple[int, int]:
    """Move the staged files in: Triton's files (then each folder's group files, re-pointed
    here), then entries, then manifests. Returns (added, present)."""
    added = present = 0
    files = index["files"]
    triton = [m for m in files if m.startswith("triton/") and "/__grp__" not in m]
    entries = [m for m in files if "/entries/" in m]
    manifests = [m for m in files if m.endswith("/manifest.json")]
    memos = [m for m in files if m.startswith("plans/")]
    for phase in (triton, None, entries, manifests, memos):
        if phase is None:
            for entry_folder in sorted({m.split("/")[1] for m in triton}):
                _write_group_files(staging, folder, entry_folder)
            continue
        for member in sorted(phase):
            dest = os.path.join(folder.root, *member.split("/"))
            if _same_bytes(dest, files[member]):
                present += 1
                continue
            source = os.path.join(staging, *member.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.chmod(source, 0o644)
            os.replace(source, dest)
            added += 1
    return added, present


def _write_group_files(staging: str, folder: CacheFolder, entry_folder: str) -> None:
    """Write the entry folder's group files, pointing at the children in ``folder`` (Triton
    keeps absolute paths there), once all of their children are in."""
    dest_dir = os.path.join(folder.triton_dir, entry_folder)
    staged = os.path.join(staging, "triton", entry_folder)
    for grp in (n for n in os.listdir(staged) if n.startswith("__grp__")):
        data = read_json(os.path.join(staged, grp))
        children = data.get("child_paths") if isinstance(data, dict) else None
        if not isinstance(children, dict):
            continue
        names = {k: os.path.basename(str(v)) for k, v in children.items()}
        if not all(os.path.exists(os.path.join(dest_dir, n)) for n in names.values()):
            continue  # not all children are in yet
        content = {"child_paths": {k: os.path.join(dest_dir, n) for k, n in names.items()}}
        if read_json(os.path.join(dest_dir, grp)) != content:
            atomic_write_json(os.path.join(dest_dir, grp), content)


def _same_bytes(path: str, digest: str) -> bool:
    try:
        with open(path, "rb") as f:
            return sha256_bytes(f.read()) == digest
    except OSError:
        return False


def import_bundle(
    path: str,
    folder: CacheFolder,
    *,
    force: bool = False,
    key: bytes | None = None,
    require: list[str] | None = None,
) -> ImportReport:
    """Verify the bundle at ``path`` in full, then install it into ``folder``. ``require``:
    manifest-name prefixes (``<geometry>-<target>-``) the bundle must hold (BundleError
    otherwise). Raises BundleError for a bundle refused, CacheError for a folder that cannot
    take it; either way nothing in ``folder`` changed."""
    folder.check_usable()
    folder.ensure_dirs()
    if not folder.writable():
        raise CacheError(folder.root, "is read-only here; import into a writable --cache-dir")
    staging = tempfile.mkdtemp(prefix=".import-", dir=folder.root)
    try:
        try:
            raw = open(path, "rb")
        except OSError as exc:
            raise BundleError(path, f"cannot be read ({exc.strerror})") from None
        with raw:
            try:
                with tarfile.open(fileobj=_open_stream(path, raw), mode="r|") as tar:
                    index = _read_index(path, tar, key)
                    _stage(path, tar, index, staging)
            except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
                if isinstance(exc, BundleError):
                    raise
                raise BundleError(path, f"is damaged or truncated ({exc})") from None
        for prefix in require or []:
            if not any(d.get("manifest", "").startswith(prefix) for d in index["deployments"]):
                held = ", ".join(d.get("target", "?") for d in index["deployments"])
                raise BundleError(
                    path,
                    f"holds no build of this config for {prefix.split('-')[1]} (it holds: "
                    f"{held or 'nothing'}); export the bundle from this deployment's cache",
                )
        tc.install_memoized_toolchain_identity(folder.memo_dir)  # the check below fills it
        deployments = _check_deployments(path, index, staging, force)
        added, present = _install(staging, folder, index)
        # the install step of a host: what its first start would compute, computed now
        targets = {tc.parse_target(d["target"]) for d in deployments if _known(d["target"])}
        tc.prime_toolchain_memo(folder.memo_dir, sorted(targets, key=lambda t: t.arch))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ImportReport(path, index["digest"], folder.root, added, present, deployments)
