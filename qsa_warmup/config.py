"""The deployment's fixed geometry: a typed, validated config, JSON files and embedded presets."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field

from .errors import ConfigError

__all__ = ["DeploymentConfig", "PRESETS", "DEFAULT_PRESET", "load_config"]

CACHE_DTYPES = ("bfloat16", "float8_e4m3fn")
POSITION_DTYPES = ("int32", "int64")


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
    position_dtypes: tuple[str, ...] = field(default=POSITION_DTYPES)

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
        if not isinstance(data, dict):
            raise ConfigError(source, "must be a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in names:
                raise ConfigError(key, f"unknown field in {source} (known: {', '.join(sorted(names))})")
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        for name in required:
            if name not in data:
                raise ConfigError(name, f"missing from {source}")
        values = dict(data)
        for name in ("num_heads", "head_dim", "page_size", "page_table_width", "compress_ratio", "token_topk",
                     "max_decode_query_len", "max_num_reqs", "max_num_batched_tokens"):
            v = values[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, f"must be a positive integer, got {v!r}")
        mb = values["max_logits_mb"]
        if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
            raise ConfigError("max_logits_mb", f"must be a positive number of MiB, got {mb!r}")
        for name, allowed in (("cache_dtypes", CACHE_DTYPES), ("position_dtypes", POSITION_DTYPES)):
            v = values.get(name, POSITION_DTYPES if name == "position_dtypes" else None)
            if not isinstance(v, (list, tuple)) or not v or not all(isinstance(x, str) for x in v):
                raise ConfigError(name, f"must be a non-empty list of {', '.join(allowed)}")
            bad = [x for x in v if x not in allowed]
            if bad:
                raise ConfigError(name, f"unsupported {bad[0]!r}; supported: {', '.join(allowed)}")
            values[name] = tuple(dict.fromkeys(v))
        if not 1 <= values["num_heads"] <= 64:
            raise ConfigError("num_heads", f"must be 1..64, got {values['num_heads']}")
        if not 64 <= values["head_dim"] <= 256:
            raise ConfigError("head_dim", f"must be 64..256, got {values['head_dim']}")
        if values["token_topk"] % values["compress_ratio"]:
            raise ConfigError("token_topk", f"must be a multiple of compress_ratio ({values['compress_ratio']})")
        target = values["target"]
        from .triton_compat import parse_target

        try:
            parse_target(target) if isinstance(target, str) else parse_target("")
        except ValueError:
            raise ConfigError("target", f"must be a CUDA target name such as 'sm_90', got {target!r}") from None
        return cls(**values)

    def replace(self, **changes) -> "DeploymentConfig":
        return DeploymentConfig.from_dict({**self.to_dict(), **changes})


PRESETS: dict[str, dict] = {
    # 32 heads x 128, page 64, 512 pages (32K compressed columns = 128K tokens at ratio 4)
    "default": dict(num_heads=32, head_dim=128, page_size=64, page_table_width=512, compress_ratio=4,
                    token_topk=2048, cache_dtypes=["bfloat16", "float8_e4m3fn"], max_decode_query_len=4,
                    max_num_reqs=256, max_num_batched_tokens=8192, max_logits_mb=512, target="sm_90"),
    # a small deployment for tests and demos: few specs, fast to compile
    "tiny": dict(num_heads=4, head_dim=64, page_size=16, page_table_width=8, compress_ratio=4, token_topk=64,
                 cache_dtypes=["bfloat16"], max_decode_query_len=2, max_num_reqs=8, max_num_batched_tokens=64,
                 max_logits_mb=1, target="sm_90", position_dtypes=["int32"]),
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


@functools.lru_cache(maxsize=64)  # every cache path names it: once per config, not per entry
def _geometry_hash(cfg: DeploymentConfig) -> str:
    d = cfg.to_dict()
    d.pop("target")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
