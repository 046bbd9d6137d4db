"""Every environment knob qsa_warmup reads, in one typed module (no other module reads os.environ).

Values are read when asked for, never at import time, so a test or a server can set them late.
"""

from __future__ import annotations

import os

from .errors import ConfigError

__all__ = [
    "cache_dir",
    "deployment",
    "strict_mode",
    "lock_timeout",
    "jobs",
    "interpreter_requested",
    "ld_library_path",
    "visible_devices",
    "CACHE_DIR_ENV",
    "CONFIG_ENV",
    "STRICT_ENV",
    "LOCK_TIMEOUT_ENV",
    "JOBS_ENV",
    "STRICT_MODES",
    "remote_url",
    "remote_key",
    "remote_readonly",
    "REMOTE_ENV",
    "REMOTE_KEY_ENV",
    "REMOTE_READONLY_ENV",
    "record_path",
    "record_target",
    "recordings",
    "strict_scope",
    "environment",
    "RECORD_ENV",
    "RECORD_TARGET_ENV",
    "RECORDINGS_ENV",
    "STRICT_SCOPE_ENV",
    "STRICT_SCOPES",
]

CACHE_DIR_ENV = "QSA_WARMUP_CACHE_DIR"
CONFIG_ENV = "QSA_WARMUP_CONFIG"
STRICT_ENV = "QSA_WARMUP_STRICT"
LOCK_TIMEOUT_ENV = "QSA_WARMUP_LOCK_TIMEOUT"
JOBS_ENV = "QSA_WARMUP_JOBS"
STRICT_MODES = ("off", "warn", "error")
REMOTE_ENV = "QSA_WARMUP_REMOTE"
REMOTE_KEY_ENV = "QSA_WARMUP_REMOTE_KEY"
REMOTE_READONLY_ENV = "QSA_WARMUP_REMOTE_READONLY"
RECORD_ENV = "QSA_WARMUP_RECORD"
RECORD_TARGET_ENV = "QSA_WARMUP_RECORD_TARGET"
RECORDINGS_ENV = "QSA_WARMUP_RECORDINGS"
STRICT_SCOPE_ENV = "QSA_WARMUP_STRICT_SCOPE"
STRICT_SCOPES = ("planned", "all")
_TRUE = ("1", "true", "on", "yes")


def cache_dir() -> str:
    """``$QSA_WARMUP_CACHE_DIR``, else the per-user cache folder (platformdirs, else
    ``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    value = os.environ.get(CACHE_DIR_ENV)
    if value:
        return os.path.abspath(os.path.expanduser(value))
    try:
        import platformdirs
    except ImportError:  # a server image without it: the XDG default platformdirs would give
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "qsa-warmup")
    return platformdirs.user_cache_dir("qsa-warmup")


def deployment() -> str | None:
    """``$QSA_WARMUP_CONFIG``: the deployment a server plugin warms (a JSON path or a preset
    name), or None where it is not set."""
    return os.environ.get(CONFIG_ENV, "").strip() or None


def strict_mode() -> str:
    value = os.environ.get(STRICT_ENV, "off").strip().lower() or "off"
    if value not in STRICT_MODES:
        raise ConfigError(STRICT_ENV, f"must be one of {', '.join(STRICT_MODES)}, got {value!r}")
    return value


def lock_timeout() -> float:
    """Seconds a process waits for another's compile of the same spec before compiling itself."""
    value = os.environ.get(LOCK_TIMEOUT_ENV, "600")
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(LOCK_TIMEOUT_ENV, f"must be a number of seconds, got {value!r}") from None
    if seconds <= 0:
        raise ConfigError(LOCK_TIMEOUT_ENV, f"must be positive, got {value!r}")
    return seconds


def jobs() -> int:
    value = os.environ.get(JOBS_ENV)
    if not value:
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(JOBS_ENV, f"must be an integer, got {value!r}") from None
    if n < 1:
        raise ConfigError(JOBS_ENV, f"must be >= 1, got {n}")
    return n


def remote_url() -> str | None:
    """The shared tier's URL (``redis://host:port/db?prefix=..&ttl=..&readonly=1``, or
    ``unix:///path/redis.sock?...``), or None for none."""
    return os.environ.get(REMOTE_ENV, "").strip() or None


def remote_key() -> bytes | None:
    """The shared key that signs what is published (HMAC-SHA256); servers holding it load only
    what a holder of it published. None: no signatures (checksums still verified)."""
    value = os.environ.get(REMOTE_KEY_ENV, "")
    return value.encode() if value else None


def remote_readonly() -> bool:
    """Never publish to the shared tier (servers), whatever the URL says."""
    return os.environ.get(REMOTE_READONLY_ENV, "0").strip().lower() in _TRUE


def visible_devices() -> str | None:
    """CUDA's ``CUDA_VISIBLE_DEVICES`` (device indices count within it), or None when unset."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def ld_library_path() -> str:
    """The dynamic linker's search path: part of the identity of Triton's libcuda lookup."""
    return os.environ.get("LD_LIBRARY_PATH", "")


def interpreter_requested() -> bool:
    """TRITON_INTERPRET is Triton's knob; warmup needs compiled kernels, so it must be off."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def record_path() -> str | None:
    """``$QSA_WARMUP_RECORD``: the recording file this process appends its Triton compile
    requests to, or None."""
    value = os.environ.get(RECORD_ENV, "").strip()
    return os.path.abspath(os.path.expanduser(value)) if value else None


def record_target() -> str | None:
    """``$QSA_WARMUP_RECORD_TARGET``: record under the offline driver for this target (no GPU,
    nothing compiled or launched), or None to record on the process's GPU."""
    return os.environ.get(RECORD_TARGET_ENV, "").strip() or None


def recordings() -> list[str]:
    """``$QSA_WARMUP_RECORDINGS``: recording files a server warms besides its deployment
    (comma- or path-separator-separated)."""
    value = os.environ.get(RECORDINGS_ENV, "")
    return [p.strip() for p in value.replace(os.pathsep, ",").split(",") if p.strip()]


def strict_scope() -> str:
    """``$QSA_WARMUP_STRICT_SCOPE``: planned (kernels of the packages a warmed plan or recording
    drew from) or all (any Triton compile after warmup)."""
    value = os.environ.get(STRICT_SCOPE_ENV, "planned").strip().lower() or "planned"
    if value not in STRICT_SCOPES:
        raise ConfigError(
            STRICT_SCOPE_ENV, f"must be one of {', '.join(STRICT_SCOPES)}, got {value!r}"
        )
    return value


def environment() -> dict:
    """A copy of this process's environment (for a child process it starts)."""
    return dict(os.environ)
