"""The shared tier: a Redis server that many hosts fetch built kernels from and publish to, so a
fleet compiles each kernel once between its hosts.

Keys (``<prefix>`` from the URL, ``v1`` the layout's version)::

    <prefix>:v1:entry:<toolchain digest>:<compile hash>   the cache entry, JSON (+ HMAC)
    <prefix>:v1:blob:<sha256>                             one file's bytes, by content
    <prefix>:v1:lock:<toolchain digest>:<compile hash>    who compiles it now (expires)
    <prefix>:v1:plan:<plan memo name>                     a plan memo, only with a key (HMAC)
    <prefix>:v1:keycheck                                  HMAC of a constant: the fleet's key
    <prefix>:v1:stats                                     fleet-wide counters (a hash)

Nothing fetched is trusted: an entry must name the spec's kernel, key and compile hash, carry
a valid HMAC when ``QSA_WARMUP_REMOTE_KEY`` is set, and name only kernel binaries and their
metadata (``.cubin``, ``.json``, ``.source``: never host code; C launchers always build
locally); every blob must hash to the sha256 the entry names. What passes is written into the
local cache (a hit is copied down) and then verified again as any local entry is.

The tier fails open: a connection error, a timeout (``timeout``, 0.5 s by default), more than
``budget`` seconds spent on it in one process (1 s), a full server or an evicted blob is
warned about once and the process compiles locally. Compile-once: a host about to compile
takes ``lock`` with an expiry (``lock_ttl``, 120 s: a dead holder's lock lapses); the others
poll the tier for the entry and fetch it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import time
import urllib.parse
import uuid
from typing import Iterator

from ._fs import atomic_write, atomic_write_json, checked_files, sha256_bytes
from .errors import ConfigError, RemoteUnavailable

__all__ = ["RemoteSettings", "RemoteTier", "RemoteStats", "open_remote"]

log = logging.getLogger(__name__)

_VERSION = "v1"
_SCHEMES = ("redis", "rediss", "unix")
_OWN_PARAMS = ("prefix", "ttl", "readonly", "timeout", "lock_ttl", "budget")
_SAFE_FILE = re.compile(r"^[A-Za-z0-9_.\-]+\.(cubin|json|source)$")
_SAFE_FOLDER = re.compile(r"^[A-Z2-7]+=*$")  # Triton's base32 compile-hash folders
_KEYCHECK = b"qsa-warmup shared tier key check"


@dataclasses.dataclass(frozen=True)
class RemoteSettings:
    url: str  # as given (handed to build workers)
    connect_url: str  # without qsa-warmup's own parameters
    display: str  # without the password
    prefix: str = "qsa-warmup"
    ttl: int = 7 * 24 * 3600
    readonly: bool = False
    timeout: float = 0.5
    lock_ttl: float = 120.0
    budget: float = 1.0

    @classmethod
    def parse(cls, url: str, *, readonly: bool = False, field: str = "--remote"):
        """Settings from ``redis://[:password@]host[:port][/db][?prefix=..&ttl=s&readonly=1&
        timeout=s&lock_ttl=s&budget=s]`` (or ``rediss://``, ``unix:///path.sock?db=N&...``)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise ConfigError(
                field,
                f"{_hide_password(url)!r} is not a Redis URL; give redis://host:port/db, "
                "rediss://... or unix:///path/to/redis.sock",
            )
        if parts.scheme != "unix" and not parts.hostname:
            raise ConfigError(field, f"{_hide_password(url)!r} names no host")
        if parts.scheme == "unix" and not parts.path:
            raise ConfigError(field, f"{_hide_password(url)!r} names no socket path")
        try:
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise ConfigError(field, f"{_hide_password(url)!r} has a bad port") from None
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        own = {k: v[-1] for k, v in query.items() if k in _OWN_PARAMS}
        rest = [(k, x) for k, v in query.items() if k not in _OWN_PARAMS for x in v]
        # rebuilt by hand: urlunsplit drops the // of unix:///path
        base = url.split("?", 1)[0].split("#", 1)[0]
        connect = base + (f"?{urllib.parse.urlencode(rest)}" if rest else "")
        values = {}
        try:
            if "prefix" in own:
                if not re.match(r"^[A-Za-z0-9_.:\-]{1,64}$", own["prefix"]):
                    raise ValueError("prefix: letters, digits and _.:- only")
                values["prefix"] = own["prefix"]
            for name, kind in (("ttl", int), ("timeout", float), ("lock_ttl", float)):
                if name in own:
                    values[name] = kind(own[name])
                    if values[name] < 0 or (name != "ttl" and values[name] == 0):
                        raise ValueError(f"{name} must be positive")
            if "budget" in own:
                values["budget"] = float(own["budget"])
            if "readonly" in own:
                values["readonly"] = own["readonly"].lower() in ("", "1", "true", "yes", "on")
        except ValueError as exc:
            raise ConfigError(field, f"{_hide_password(url)!r}: {exc}") from None
        values["readonly"] = values.get("readonly", False) or readonly
        return cls(url, connect, _hide_password(connect), **values)

    def as_url(self) -> str:
        """The URL with ``readonly`` made explicit (what build workers are handed)."""
        if not self.readonly:
            return self.url
        sep = "&" if "?" in self.url else "?"
        return f"{self.url}{sep}readonly=1"


def _hide_password(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


@dataclasses.dataclass
class RemoteStats:
    hits: int = 0
    misses: int = 0
    bytes_fetched: int = 0
    published: int = 0
    bytes_published: int = 0
    poisoned: int = 0  # entries or blobs that failed verification (never loaded)
    evicted: int = 0  # entries whose blobs were gone
    errors: int = 0  # connection errors and timeouts (the tier was then left alone)
    seconds: float = 0.0  # spent talking to the tier (waits for another host's compile aside)

    def add(self, other: dict) -> None:
        for name, value in other.items():
            setattr(self, name, getattr(self, name) + value)


class RemoteTier:
    """One process's client of the shared tier, for one toolchain (``fingerprint_digest``)."""

    def __init__(
        self,
        settings: RemoteSettings,
        key: bytes | None,
        fingerprint_digest: str,
        *,
        budgeted: bool = False,
    ):
        self.settings = settings
        # a start (the hook) bounds what the tier adds to it; a build does not: it compiles for
        # seconds anyway, and giving up the tier there would give up compile-once
        self.budgeted = budgeted
        self.key = key
        self.fingerprint_digest = fingerprint_digest
        self.stats = RemoteStats()
        self.problems: list[str] = []  # said once each
        # spec id -> why the tier's copy failed verification: not fetched again by this client
        # (a writer's compile publishes a good copy over it)
        self.bad: dict[str, str] = {}
        self._client = None
        self._down: str | None = None
        self._slow = False  # down for the budget only: still fine for builds
        self._spent = 0.0
        self._owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.key_mismatch: str | None = None

    # -- plumbing -------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        return self._down is None

    @property
    def usable_for_builds(self) -> bool:
        """Whether a build (unbudgeted) may still use the tier: it answered, with the fleet's
        key, only more slowly than a start may wait."""
        return self._down is None or self._slow

    def _key(self, kind: str, *parts: str) -> str:
        return ":".join((self.settings.prefix, _VERSION, kind, *parts))

    def _entry_key(self, compile_hash: str) -> str:
        return self._key("entry", self.fingerprint_digest, compile_hash)

    def _problem(self, message: str) -> None:
        if message not in self.problems:
            self.problems.append(message)
            log.warning("shared tier %s: %s", self.settings.display, message)

    # calls made while this process compiles anyway (seconds): they do not count against the
    # budget, which bounds what the tier adds to a start (on a host busy compiling, their wall
    # time is mostly waiting for a core)
    _UNBUDGETED = ("lock", "unlock", "publish", "refresh", "stats")

    def _call(self, what: str, fn):
        """``fn(client)``, or None once the tier failed (it is then left alone: fail open)."""
        if self._down is not None:
            return None
        if self._client is None:
            import redis  # noqa: F401  (local work: kept off the budget, which is the tier's)
        start = time.perf_counter()
        try:
            client = self._connected()
            if client is None:  # another fleet's tier: take nothing, publish nothing
                self._down = self.key_mismatch  # said by the caller: an error or a warning
                return None
            return fn(client)
        except Exception as exc:  # redis raises its own ConnectionError, TimeoutError, ...
            self.stats.errors += 1
            self._down = f"{what} failed ({type(exc).__name__}: {exc})"
            self._problem(f"{self._down}; compiling locally")
            return None
        finally:
            if what not in self._UNBUDGETED:
                self._spent += time.perf_counter() - start
            self.stats.seconds = round(self._spent, 4)
            if self.budgeted and self._spent > self.settings.budget and self._down is None:
                self._down = f"slow: {self._spent:.2f} s spent on it"
                self._slow = True
                self._problem(f"{self._down}; not waiting on it for this start")

    def _connected(self):
        """The client, connected on first use, when the key (if any) is the fleet's; None when
        it is not (``key_mismatch`` says why). Raises what the client raises."""
        if self._client is None:
            client = _connect(self.settings)
            if self.key is not None:
                self.key_mismatch = self._check_key(client)
            self._client = client
        return None if self.key_mismatch else self._client

    def ping(self) -> None:
        """RemoteUnavailable unless the tier answers (``check --remote`` insists on it)."""
        try:
            client = self._connected()
            if client is not None:
                client.ping()
        except Exception as exc:
            self._down = f"{type(exc).__name__}: {exc}"
            raise RemoteUnavailable(
                self.settings.display, f"does not answer ({self._down}); start it or fix --remote"
            ) from None

    def key_problem(self) -> str | None:
        """Why this process's key does not match the fleet's (the tier keeps an HMAC of a
        constant under the first writer's key), or None (also when the tier is down). Checked
        on the first use of the tier in any case; ``prebuild`` and ``check`` ask first."""
        self._call("keycheck", lambda c: None)
        return self.key_mismatch

    def _check_key(self, client) -> str | None:
        mine = hmac.new(self.key, _KEYCHECK, hashlib.sha256).hexdigest().encode()
        stored = client.get(self._key("keycheck"))
        if stored is None:
            if not self.settings.readonly:
                client.set(self._key("keycheck"), mine, nx=True)
            return None
        if not hmac.compare_digest(stored, mine):
            return (
                "QSA_WARMUP_REMOTE_KEY differs from the key the tier's entries are signed with; "
                "use the fleet's key"
            )
        return None

    def _sign(self, record: dict) -> str:
        body = json.dumps(record, sort_keys=True).encode()
        return hmac.new(self.key, body, hashlib.sha256).hexdigest()

    def _count(self, **fields: int) -> None:
        if not self.settings.readonly and fields:
            self._call(
                "stats", lambda c: [c.hincrby(self._key("stats"), k, v) for k, v in fields.items()]
            )

    # -- fetch ----------------------------------------------------------------------------
    def fetch(self, cache, specs) -> list:
        """Fetch what the tier holds of ``specs`` into ``cache``'s write folder, verified; the
        specs now held locally (two round trips for any number of specs). A spec not fetched
        counts as a miss only when it is compiled (:meth:`missed`): a build asks again under
        its lock before compiling."""
        folder = cache.write_folder
        specs = [s for s in specs if s.compile_hash and s.id not in self.bad]
        if folder is None or not specs or not self.available:
            return []
        raw = self._call(
            "fetch", lambda c: c.mget([self._entry_key(s.compile_hash) for s in specs])
        )
        if raw is None:
            return []
        records = {}
        for spec, value in zip(specs, raw):
            record = self._verified_record(spec, value) if value is not None else None
            if record is not None:
                records[spec.id] = (spec, record)
        if not records:
            return []
        digests = sorted({d for _, r in records.values() for d in r["entry"]["files"].values()})
        blobs = self._call("fetch", lambda c: c.mget([self._key("blob", d) for d in digests]))
        if blobs is None:
            return []
        by_digest = dict(zip(digests, blobs))
        fetched, got = [], 0
        for spec, record in records.values():
            files = self._verified_files(spec, record["entry"], by_digest)
            if files is None:
                continue
            self._install(cache, folder, spec, record["entry"], files)
            fetched.append(spec)
            got += sum(len(b) for b in files.values())
        self.stats.hits += len(fetched)
        self.stats.bytes_fetched += got
        self._count(hits=len(fetched), bytes_fetched=got)
        self._refresh(fetched, records, digests)
        return fetched

    def missed(self) -> None:
        """A spec the tier did not hold is being compiled here."""
        self.stats.misses += 1
        self._count(misses=1)

    def _verified_record(self, spec, value: bytes) -> dict | None:
        try:
            record = json.loads(value)
            entry = record["entry"]
            ok = (
                isinstance(entry, dict)
                and entry.get("kernel") == spec.kernel
                and entry.get("key") == spec.key
                and entry.get("hash") == spec.compile_hash
                and isinstance(entry.get("files"), dict)
                and entry["files"]
                and isinstance(entry.get("folder"), str)
                and _SAFE_FOLDER.match(entry["folder"])
                and all(isinstance(n, str) and _SAFE_FILE.match(n) for n in entry["files"])
                and all(re.fullmatch(r"[0-9a-f]{64}", str(d)) for d in entry["files"].values())
            )
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            self._poisoned(spec, "entry does not match the spec or names files it may not")
            return None
        if self.key is not None:
            signature = record.get("sig")
            body = {k: v for k, v in record.items() if k != "sig"}
            if not isinstance(signature, str) or not hmac.compare_digest(
                signature, self._sign(body)
            ):
                self._poisoned(spec, "entry is unsigned or signed with another key")
                return None
        return record

    def _verified_files(self, spec, entry: dict, by_digest: dict) -> dict | None:
        files = {}
        for name, digest in entry["files"].items():
            data = by_digest.get(digest)
            if data is None:
                if spec.id not in self.bad:
                    self.bad[spec.id] = "evicted"
                    self.stats.evicted += 1
                    self._problem(f"{spec.id}: {name} was evicted; compiling locally")
                return None
            if sha256_bytes(data) != digest:
                self._poisoned(spec, f"{name} does not match its checksum")
                return None
            files[name] = data
        return files

    def _poisoned(self, spec, why: str) -> None:
        if spec.id in self.bad:
            return
        self.bad[spec.id] = why
        self.stats.poisoned += 1
        self._problem(f"{spec.id}: {why}; not loaded, compiling locally")
        self._count(poisoned=1)

    def _install(self, cache, folder, spec, entry: dict, files: dict) -> None:
        """The fetched files into the local cache: Triton's files, the group file naming them
        here, then the entry (last, so a reader never sees an entry without its files)."""
        # The folder is filled under a temp name and renamed into place whole (one rename, not
        # one per file); no fsync: every file is checked against the entry before it is
        # loaded, so what a crash could tear is rebuilt, never loaded.
        entry_dir = os.path.join(folder.triton_dir, entry["folder"])
        kernel = os.path.splitext(next(n for n in files if n.endswith(".cubin")))[0]
        children = {n: os.path.join(entry_dir, n) for n in files}
        group = {f"__grp__{kernel}.json": json.dumps({"child_paths": children}).encode()}
        placed = False
        if not os.path.isdir(entry_dir):
            os.makedirs(folder.triton_dir, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".fetch-", dir=folder.triton_dir)
            for name, data in {**files, **group}.items():
                with open(os.path.join(staging, name), "wb") as f:
                    f.write(data)
            os.chmod(staging, 0o755)  # mkdtemp makes it private to this user
            try:
                os.rename(staging, entry_dir)
                placed = True
            except OSError:  # another process put the folder there meanwhile
                shutil.rmtree(staging, ignore_errors=True)
        if not placed and checked_files(entry_dir, entry["files"])[0] is not None:
            for name, data in {**files, **group}.items():  # a damaged folder: file by file
                atomic_write(os.path.join(entry_dir, name), data, durable=False)
        entry_path = cache.entry_path(folder, spec.id)
        atomic_write_json(entry_path, {**entry, "spec": spec.id}, durable=False)

    def _refresh(self, fetched, records, digests) -> None:
        """Hits keep their keys alive (the TTL counts from the last use)."""
        if self.settings.readonly or not self.settings.ttl or not fetched:
            return
        keys = [self._entry_key(s.compile_hash) for s in fetched]
        keys += [self._key("blob", d) for d in digests]

        def touch(client):
            pipe = client.pipeline(transaction=False)
            for k in keys:
                pipe.expire(k, self.settings.ttl)
            pipe.execute()

        self._call("refresh", touch)

    # -- publish --------------------------------------------------------------------------
    def publish(self, spec, entry: dict, entry_dir: str) -> None:
        """The entry's files, then the entry (a reader finds the entry only after its blobs)."""
        if self.settings.readonly or not spec.compile_hash or not self.available:
            return
        files = {}
        for name, digest in entry["files"].items():
            if not _SAFE_FILE.match(name):
                continue  # never publish anything but kernel binaries and their metadata
            with open(os.path.join(entry_dir, name), "rb") as f:
                data = f.read()
            if sha256_bytes(data) != digest:
                return  # changed under us: publish nothing rather than something wrong
            files[name] = data
        record = {"entry": {**entry, "files": {n: entry["files"][n] for n in files}}}
        if self.key is not None:
            record["sig"] = self._sign(record)
        ttl = self.settings.ttl or None

        def put(client):
            pipe = client.pipeline(transaction=False)
            for data in files.values():
                pipe.set(self._key("blob", sha256_bytes(data)), data, ex=ttl)
            pipe.execute()
            return client.set(self._entry_key(spec.compile_hash), json.dumps(record), ex=ttl)

        if self._call("publish", put):
            size = sum(len(d) for d in files.values())
            self.stats.published += 1
            self.stats.bytes_published += size
            self._count(published=1, bytes_published=size)

    # -- plans ----------------------------------------------------------------------------
    def fetch_plan(self, name: str) -> list | None:
        """A plan memo a holder of the fleet key published (never an unsigned one: a plan
        names what each kernel is loaded as, so only a signed one is taken)."""
        if self.key is None or not self.available:
            return None
        value = self._call("plan", lambda c: c.get(self._key("plan", name)))
        if value is None:
            return None
        try:
            record = json.loads(value)
            ok = isinstance(record.get("memo"), list) and isinstance(record.get("sig"), str)
        except (ValueError, AttributeError):
            ok = False
        if not ok or not hmac.compare_digest(record["sig"], self._sign({"memo": record["memo"]})):
            self._problem(f"plan {name} is unsigned, damaged or signed with another key; planning")
            return None
        return record["memo"]

    def publish_plan(self, name: str, memo: list) -> None:
        if self.key is None or self.settings.readonly or not self.available:
            return
        record = {"memo": memo, "sig": self._sign({"memo": memo})}
        ttl = self.settings.ttl or None
        self._call("publish", lambda c: c.set(self._key("plan", name), json.dumps(record), ex=ttl))

    # -- compile-once across hosts ----------------------------------------------------------
    @contextlib.contextmanager
    def compile_turn(self, cache, spec, wait: float) -> Iterator[bool]:
        """Yields True when another host built ``spec`` meanwhile (it is now fetched into
        ``cache``), False when this process should compile it (holding the tier's lock for it
        where it could take it). Waits at most ``wait`` seconds for another holder."""
        if self.settings.readonly or not spec.compile_hash:
            yield False
            return
        lock = self._key("lock", self.fingerprint_digest, spec.compile_hash)
        ttl_ms = int(self.settings.lock_ttl * 1000)
        deadline = time.monotonic() + wait
        held = False
        while self.available:
            # polling while another host compiles is waiting, not the tier's cost: off the budget
            spent = self._spent
            held = bool(self._call("lock", lambda c: c.set(lock, self._owner, nx=True, px=ttl_ms)))
            if held:
                # asked again under the lock: a host may have published it since it was asked
                got = self.fetch(cache, [spec])
                if got:
                    self._call("unlock", lambda c: _release(c, lock, self._owner))
                    yield True
                    return
                break
            if not self.available:
                break
            time.sleep(0.1)
            self._spent = spent
            if self.fetch(cache, [spec]):
                yield True
                return
            self._spent = spent
            if time.monotonic() > deadline:
                self._problem(f"{spec.id}: waited {wait:.0f} s for another host; compiling")
                break
        try:
            yield False
        finally:
            if held:
                self._call("unlock", lambda c: _release(c, lock, self._owner))

    # -- what the tier holds ----------------------------------------------------------------
    def held(self, specs) -> dict[str, str]:
        """{spec id: "ok" or why not} for each spec: the entry and every blob present and
        verified (downloads the bytes; ``check --remote``)."""
        states = {}
        for spec in specs:
            key = self._entry_key(spec.compile_hash)
            value = self._call("check", lambda c, key=key: c.get(key))
            if value is None:
                states[spec.id] = "not in the tier" if self.available else self._down
                continue
            record = self._verified_record(spec, value)
            if record is None:
                states[spec.id] = "poisoned entry"
                continue
            keys = [self._key("blob", d) for d in record["entry"]["files"].values()]
            blobs = self._call("check", lambda c, keys=keys: c.mget(keys))
            digests = list(record["entry"]["files"].values())
            files = self._verified_files(spec, record["entry"], dict(zip(digests, blobs or [])))
            states[spec.id] = "ok" if files is not None else "evicted or poisoned blob"
        return states

    def summary(self) -> dict:
        """What the tier holds under the prefix, and its fleet-wide counters (``info``)."""

        def scan(client):
            counts = {"entries": 0, "blobs": 0, "bytes": 0}
            for kind in ("entry", "blob"):
                for k in client.scan_iter(match=self._key(kind, "*"), count=1000):
                    counts["entries" if kind == "entry" else "blobs"] += 1
                    if kind == "blob":
                        counts["bytes"] += client.strlen(k)
            stats = {k.decode(): int(v) for k, v in client.hgetall(self._key("stats")).items()}
            return {**counts, "counters": stats}

        result = self._call("info", scan)
        if result is None:
            raise RemoteUnavailable(self.settings.display, self._down or "no answer")
        return result


def _release(client, lock: str, owner: str) -> None:
    # delete the lock only if it is still ours (it may have lapsed and been taken since)
    client.eval(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end",
        1,
        lock,
        owner,
    )


def _connect(settings: RemoteSettings):
    import redis

    return redis.Redis.from_url(
        settings.connect_url,
        socket_timeout=settings.timeout,
        socket_connect_timeout=settings.timeout,
        retry_on_timeout=False,
        health_check_interval=0,
    )


def open_remote(
    url: str | None,
    fingerprint_digest: str,
    *,
    key=None,
    readonly=False,
    budgeted=False,
    field="--remote",
):
    """A RemoteTier for ``url`` (None: None). ConfigError for a malformed URL; a tier that is
    down is found out on first use (fail open)."""
    if not url:
        return None
    settings = RemoteSettings.parse(url, readonly=readonly, field=field)
    # found, not imported: the import costs ~0.1 s, which a warm start never pays
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(field, "the redis package is not installed; pip install redis")
    return RemoteTier(settings, key, fingerprint_digest, budgeted=budgeted)
