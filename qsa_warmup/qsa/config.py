"""The deployment's fixed geometry: a typed, validated config, JSON files and embedded presets."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field

from kernels import limits

from ..errors import ConfigError

__all__ = ["DeploymentConfig", "PRESETS", "DEFAULT_PRESET", "load_config", "target_problems"]

_POSITIVE_INTS = (
    "num_heads",
    "head_dim",
    "page_size",
    "page_table_width",
    "compress_ratio",
    "token_topk",
    "max_decode_query_len",
    "max_num_reqs",
    "max_num_batched_tokens",
)


@dataclass(frozen=True)
class DeploymentConfig:
    num_heads: int
    head_dim: int
    page_size: int
    page_table_width: int
    compress_ratio: int
    token_topk: int
    cache_dtypes: tuple[str, ...]
    max_decode_query_len: int
    max_num_reqs: int
    max_num_batched_tokens: int
    max_logits_mb: float
    target: str
    position_dtypes: tuple[str, ...] = field(default=limits.POSITION_DTYPES)

    @property
    def num_columns(self) -> int:
        return self.page_table_width * self.page_size

    @property
    def block_topk(self) -> int:
        return self.token_topk // self.compress_ratio

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["cache_dtypes"] = list(self.cache_dtypes)
        d["position_dtypes"] = list(self.position_dtypes)
        return d

    def geometry_hash(self) -> str:
        """Identity of what the plan depends on (the target is keyed separately)."""
        return _geometry_hash(self)

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "config") -> "DeploymentConfig":
        """A validated config; raises ConfigError listing every problem found, each naming
        its field."""
        if not isinstance(data, dict):
            raise ConfigError(source, "must be a JSON object")
        values, problems = _validated(data, source)
        if problems:
            raise ConfigError.several(problems)
        return cls(**values)

    def check_target(self, target: str, field: str = "target") -> None:
        """ConfigError unless this Triton compiles for ``target`` and it runs every cache dtype."""
        problems = target_problems(target, self.cache_dtypes, field)
        if problems:
            raise ConfigError.several(problems)

    def replace(self, **changes) -> "DeploymentConfig":
        return DeploymentConfig.from_dict({**self.to_dict(), **changes})


PRESETS: dict[str, dict] = {
    # 32 heads x 128, page 64, 512 pages (32K compressed columns = 128K tokens at ratio 4)
    "default": dict(
        num_heads=32,
        head_dim=128,
        page_size=64,
        page_table_width=512,
        compress_ratio=4,
        token_topk=2048,
        cache_dtypes=["bfloat16", "float8_e4m3fn"],
        max_decode_query_len=4,
        max_num_reqs=256,
        max_num_batched_tokens=8192,
        max_logits_mb=512,
        target="sm_90",
    ),
    # a small deployment for tests and demos: few specs, fast to compile
    "tiny": dict(
        num_heads=4,
        head_dim=64,
        page_size=16,
        page_table_width=8,
        compress_ratio=4,
        token_topk=64,
        cache_dtypes=["bfloat16"],
        max_decode_query_len=2,
        max_num_reqs=8,
        max_num_batched_tokens=64,
        max_logits_mb=1,
        target="sm_90",
        position_dtypes=["int32"],
    ),
}
DEFAULT_PRESET = "default"


def load_config(path: str | None = None, preset: str | None = None) -> DeploymentConfig:
    """A config from a JSON file, else from a named preset (default: ``default``)."""
    if path is not None:
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as exc:
            raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError("--config", f"{path} is not valid JSON: {exc}") from None
        return DeploymentConfig.from_dict(data, source=path)
    name = preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise ConfigError("--preset", f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    return DeploymentConfig.from_dict(PRESETS[name], source=f"preset {name}")


def _validated(data: dict, source: str) -> tuple[dict, list[tuple[str, str]]]:
    names = {f.name for f in dataclasses.fields(DeploymentConfig)}
    problems = [
        (key, f"unknown field in {source} (known: {', '.join(sorted(names))})")
        for key in data
        if key not in names
    ]
    problems += [
        (f.name, f"missing from {source}")
        for f in dataclasses.fields(DeploymentConfig)
        if f.default is dataclasses.MISSING and f.name not in data
    ]
    values = dict(data)
    for name in _POSITIVE_INTS:
        v = values.get(name, 1)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append((name, f"must be a positive integer, got {v!r}"))
            values[name] = None
    mb = values.get("max_logits_mb", 1)
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
        problems.append(("max_logits_mb", f"must be a positive number of MiB, got {mb!r}"))
    for name, allowed in (
        ("cache_dtypes", limits.CACHE_DTYPES),
        ("position_dtypes", limits.POSITION_DTYPES),
    ):
        v = values.get(name, limits.POSITION_DTYPES if name == "position_dtypes" else ["bfloat16"])
        if not isinstance(v, (list, tuple)) or not v or not all(isinstance(x, str) for x in v):
            problems.append((name, f"must be a non-empty list of {', '.join(allowed)}"))
            values[name] = ()
            continue
        bad = [x for x in v if x not in allowed]
        if bad:
            problems.append((name, f"unsupported {bad[0]!r}; supported: {', '.join(allowed)}"))
        values[name] = tuple(dict.fromkeys(x for x in v if x in allowed))
    _check_range(values, "num_heads", limits.MIN_HEADS, limits.MAX_HEADS, problems)
    _check_range(values, "head_dim", limits.MIN_HEAD_DIM, limits.MAX_HEAD_DIM, problems)
    topk, ratio = values.get("token_topk"), values.get("compress_ratio")
    if isinstance(topk, int) and isinstance(ratio, int) and topk % ratio:
        problems.append(
            (
                "token_topk",
                f"must be a multiple of compress_ratio ({ratio}); "
                f"{topk // ratio * ratio or ratio} is the nearest below",
            )
        )
    if "target" in data:
        problems += target_problems(data["target"], values.get("cache_dtypes", ()), "target")
    return values, problems


def _check_range(values, name, low, high, problems) -> None:
    v = values.get(name)
    if isinstance(v, int) and not isinstance(v, bool) and not low <= v <= high:
        problems.append((name, f"must be {low}..{high}, got {v}"))


def target_problems(target, cache_dtypes, field: str = "target") -> list[tuple[str, str]]:
    """What is wrong with building for ``target``: a name this Triton cannot compile for, or a
    cache dtype the target cannot run (fp8 below sm_89), naming the dtype and the minimum."""
    from ..triton_compat import parse_target

    try:
        arch = parse_target(target).arch
    except ValueError as exc:
        return [(field, str(exc))]
    return [
        (
            "cache_dtypes",
            f"{name} needs sm_{limits.min_arch_for(name)} or newer, and the target is {target}; "
            f"drop {name} from cache_dtypes or build for sm_{limits.min_arch_for(name)}+",
        )
        for name in cache_dtypes
        if arch < limits.min_arch_for(name)
    ]


@functools.lru_cache(maxsize=64)  # every cache path names it: once per config, not per entry
def _geometry_hash(cfg: DeploymentConfig) -> str:
    d = cfg.to_dict()
    d.pop("target")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
