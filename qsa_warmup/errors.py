"""Exceptions, each a subclass of the builtin a caller would catch, carrying its context."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CacheError",
    "BundleError",
    "RecordingError",
    "RemoteUnavailable",
    "StrictModeError",
    "WarmupUnavailable",
]


class ConfigError(ValueError):
    """A deployment config, argument or knob value is invalid. ``problems`` lists every
    (field, message) found in one pass; ``field`` names the first."""

    def __init__(self, field: str, message: str, *, problems: list[tuple[str, str]] | None = None):
        self.problems = list(problems or [(field, message)])
        self.field = self.problems[0][0]
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.problems))

    @classmethod
    def several(cls, problems: list[tuple[str, str]]) -> "ConfigError":
        return cls(*problems[0], problems=problems)


class CacheError(OSError):
    """The cache folder cannot be used as asked (``path`` names the file or folder)."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path


class BundleError(ValueError):
    """A bundle is refused: damaged, unsafe, or not for this toolchain (``path`` names it)."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path


class RecordingError(ValueError):
    """A recording cannot be used as asked. ``problems`` lists (what, fix) for each entry or
    line at fault; ``path`` names the recording."""

    def __init__(self, path: str, problems: list[tuple[str, str]]):
        self.path, self.problems = path, list(problems)
        shown = "; ".join(f"{what}: {fix}" for what, fix in self.problems[:5])
        more = f" (and {len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(f"{path}: {shown}{more}")


class RemoteUnavailable(ConnectionError):
    """The shared tier cannot be reached or answered wrongly where an answer is required
    (``url`` names it, without its password)."""

    def __init__(self, url: str, message: str):
        super().__init__(f"{url}: {message}")
        self.url = url


class StrictModeError(RuntimeError):
    """A kernel was about to JIT-compile after warmup under strict mode ``error``."""

    def __init__(self, requested: str, closest: str | None):
        hint = f"; closest planned: {closest}" if closest else ""
        super().__init__(f"JIT compile after warmup: {requested}{hint}")
        self.requested = requested
        self.closest = closest


class WarmupUnavailable(RuntimeError):
    """Warmup cannot run in this process (e.g. TRITON_INTERPRET=1)."""
