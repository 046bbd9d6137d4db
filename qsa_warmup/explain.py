"""Why a planned spec is not ready: ``qsa-warmup explain SPEC_ID`` and ``check --explain``.

A spec that is missing or stale is compared with the nearest entry of the same kernel the
cache holds (any manifest: another toolchain, target or config), part by part: the toolchain
(``python 3.11 vs 3.12``), the target, each argument of Triton's key (a constexpr's value, an
argument's specialization such as its 16-byte divisibility) and each compile option, named
after the kernel's parameters; then what to do about it.
"""

from __future__ import annotations

import ast
import difflib
import os
from dataclasses import asdict, dataclass, field

from ._fs import read_json
from .cache import BoundCache, Fingerprint, Lookup
from .errors import ConfigError

__all__ = ["Explanation", "explain_spec", "key_differences"]

_SPECIALIZATION = {"D": "divisible by 16", "": "not divisible by 16"}


@dataclass
class Explanation:
    spec: str
    state: str
    reason: str
    nearest: dict | None = None  # manifest, target and spec of the nearest entry
    differences: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [f"{self.spec}: {self.state}" + (f" ({self.reason})" if self.reason else "")]
        if self.nearest:
            n = self.nearest
            out.append(f"  nearest entry: {n['spec']} in {n['manifest']} ({n['target']})")
        out += [f"  differs: {d}" for d in self.differences]
        out += [f"  to do: {a}" for a in self.advice]
        return out


def _split_key(key: str) -> tuple[list, dict] | None:
    """Triton's in-memory key ``[(type, specialization), ...]{options}``, parsed; None when
    it has another shape (another Triton)."""
    cut = key.rfind("]{")
    if cut < 0:
        return None
    try:
        args, options = ast.literal_eval(key[: cut + 1]), ast.literal_eval(key[cut + 1 :])
    except (SyntaxError, ValueError):
        return None
    if not isinstance(args, list) or not isinstance(options, dict):
        return None
    return args, options


def _describe_arg(value) -> str:
    if isinstance(value, (tuple, list)) and len(value) == 2:
        kind, spec = value
        if kind == "constexpr":
            return repr(spec)
        return f"{kind}, {_SPECIALIZATION.get(spec, repr(spec))}"
    return repr(value)


def key_differences(cached: str, planned: str, arg_names: list[str]) -> list[str]:
    """Each part of two Triton keys that differs, named: ``constexpr BLOCK: 512 cached, 1024
    planned``; ``argument n: i32, not divisible by 16 cached, i32, divisible by 16 planned``."""
    a, b = _split_key(cached), _split_key(planned)
    if a is None or b is None:
        return [] if cached == planned else ["Triton's key has another shape (another Triton?)"]
    (args_a, opts_a), (args_b, opts_b) = a, b
    out = []
    for i in range(max(len(args_a), len(args_b))):
        va = args_a[i] if i < len(args_a) else None
        vb = args_b[i] if i < len(args_b) else None
        if va == vb:
            continue
        name = arg_names[i] if i < len(arg_names) else f"#{i}"
        constexpr = any(isinstance(v, tuple) and v and v[0] == "constexpr" for v in (va, vb))
        what = "constexpr" if constexpr else "argument"
        out.append(f"{what} {name}: {_describe_arg(va)} cached, {_describe_arg(vb)} planned")
    for name in sorted(set(opts_a) | set(opts_b)):
        if opts_a.get(name) != opts_b.get(name):
            out.append(f"option {name}: {opts_a.get(name)!r} cached, {opts_b.get(name)!r} planned")
    return out


def _candidates(cache: BoundCache, kernel: str):
    """(manifest name, manifest, entry) for every entry of ``kernel`` in the cache's layers."""
    for folder in cache.layers:
        try:
            names = sorted(os.listdir(folder.qsa_dir))
        except OSError:
            continue
        for name in names:
            manifest = read_json(os.path.join(folder.qsa_dir, name, "manifest.json"))
            if not isinstance(manifest, dict) or not isinstance(manifest.get("fingerprint"), dict):
                continue
            entries = os.path.join(folder.qsa_dir, name, "entries")
            try:
                entry_names = sorted(os.listdir(entries))
            except OSError:
                continue
            for entry_name in entry_names:
                entry = read_json(os.path.join(entries, entry_name))
                if isinstance(entry, dict) and entry.get("kernel") == kernel:
                    yield name, manifest, entry


def _compare(cache: BoundCache, spec, manifest: dict, entry: dict) -> list[str]:
    cached, here = manifest["fingerprint"], cache.fingerprint.parts
    other_target = manifest.get("target") != cache.target
    # a target's own ptxas (ptxas-blackwell for sm_100 and newer) follows from the target
    skip = Fingerprint.TARGET_PARTS if other_target else ("target",)
    diffs = [
        f"toolchain: {part} {cached.get(part)} cached, {here.get(part)} here"
        for part in sorted(set(cached) | set(here))
        if part not in skip and cached.get(part) != here.get(part)
    ]
    if other_target:
        diffs.append(f"target: {manifest.get('target')} cached, {cache.target} planned")
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    mine = cache.config.to_dict()
    diffs += [
        f"config {name}: {config.get(name)!r} cached, {mine.get(name)!r} planned"
        for name in sorted(mine)
        if name != "target" and config and config.get(name) != mine.get(name)
    ]
    names = list(getattr(spec.launch.kernel, "arg_names", []))
    diffs += key_differences(str(entry.get("key", "")), spec.key, names)
    if not diffs and spec.compile_hash and entry.get("hash") != spec.compile_hash:
        diffs.append("compile hash: the kernel's source or Triton's options changed since")
    return diffs


def _advice(lookup: Lookup, diffs: list[str]) -> list[str]:
    if lookup.state == "corrupt":
        return ["qsa-warmup prebuild rebuilds it (a damaged entry is never loaded)"]
    if lookup.state == "unloadable":
        return ["the kernel exceeds one block of the target: plan it for a GPU that fits"]
    advice = []
    if any(d.startswith("toolchain:") for d in diffs):
        advice.append(
            "it was built by another toolchain: prebuild with the server's Python and Triton "
            "(prebuild --expect-fingerprint a server's `info --json` checks it)"
        )
    if any(d.startswith("target:") for d in diffs):
        advice.append("prebuild --target for this GPU as well (one cache holds several)")
    variant = [d for d in diffs if d.startswith(("constexpr", "argument", "option", "compile"))]
    if not variant and any(d.startswith("config") for d in diffs):
        advice.append(
            "the same variant is built for another config, whose manifest does not name this "
            "one: prebuild this config"
        )
    elif variant:
        advice.append(
            "the launch asks for another variant than the one built: the config or the "
            "kernels changed since the build; prebuild this config"
        )
    return advice or ["never built: qsa-warmup prebuild with this config and target"]


def explain_spec(cache: BoundCache, plan, spec_id: str) -> Explanation:
    """What is wrong with ``spec_id`` of ``plan`` in ``cache``, and what to do."""
    by_id = plan.by_id()
    spec = by_id.get(spec_id)
    if spec is None:
        close = difflib.get_close_matches(spec_id, list(by_id), n=1, cutoff=0.0)
        hint = f"; closest: {close[0]}" if close else ""
        raise ConfigError(
            "SPEC_ID",
            f"{spec_id!r} is not in the plan of this config for {plan.target}{hint} "
            "(`qsa-warmup plan` lists them)",
        )
    lookup = cache.loadable(cache.lookup(spec))
    if lookup.ok:
        return Explanation(spec_id, "ok", "built, verified and loadable")
    scored = [
        (_compare(cache, spec, manifest, entry), name, manifest, entry)
        for name, manifest, entry in _candidates(cache, spec.kernel)
    ]
    if not scored:
        return Explanation(
            spec_id, lookup.state, lookup.reason, advice=_advice(lookup, ["never built"])
        )
    diffs, name, manifest, entry = min(scored, key=lambda s: (len(s[0]), s[1]))
    if lookup.state in ("corrupt", "unloadable") and lookup.entry is not None:
        diffs = []  # the entry of this very spec exists: its damage or size is the story
    nearest = {"manifest": name, "target": manifest.get("target"), "spec": entry.get("spec")}
    return Explanation(spec_id, lookup.state, lookup.reason, nearest, diffs, _advice(lookup, diffs))
