"""The vLLM plugin: warmup at server start, with no change to the server's code.

vLLM loads every entry point of the ``vllm.general_plugins`` group in each of its processes
(the API server, the engine core, every worker), possibly more than once, and before a worker
has picked its GPU. So :func:`register`:

- reads the deployment from ``$QSA_WARMUP_CONFIG`` (a JSON path or a preset name) and the
  recordings from ``$QSA_WARMUP_RECORDINGS``; the cache, strict mode and shared tier come from
  the knobs the hook reads; with ``$QSA_WARMUP_RECORD`` set, it records every Triton compile
  request of the process (any kernel) into that file;
- in a process that already uses a CUDA device, warms up for it at once;
- in one that has not picked a device yet, waits for it: the first ``torch.cuda.set_device``
  of the process (how vLLM's worker binds its GPU) runs the warmup right after, for that
  device; a process that never picks one (the API server) never warms up;
- in one that has no CUDA device, returns at once, saying why.

Importing this module imports neither vLLM nor torch nor Triton.
"""

from __future__ import annotations

import logging
import threading

from . import knobs
from .errors import ConfigError

__all__ = ["register"]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_state = {"registered": False}


def register() -> None:
    """The ``vllm.general_plugins`` entry point: safe to call any number of times."""
    with _lock:
        if _state["registered"]:
            return
        _state["registered"] = True
    if knobs.record_path():  # a dummy-run sweep recorded for an offline build
        from .recording import start_recording_from_knobs

        start_recording_from_knobs()
    deployment = knobs.deployment()
    if deployment is None and not knobs.recordings():
        log.info(
            "qsa-warmup: %s is not set (nor %s); no warmup in this process",
            knobs.CONFIG_ENV,
            knobs.RECORDINGS_ENV,
        )
        return
    config = _config(deployment) if deployment is not None else None
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        log.info("qsa-warmup: no CUDA device in this process; no warmup here")
        return
    if torch.cuda.is_initialized():
        _warm(config, torch.cuda.current_device())
        return
    _warm_when_device_is_set(torch, config)
    log.info("qsa-warmup: warmup deferred until this process sets its CUDA device")


def _config(deployment: str):
    """The deployment, checked now: a misnamed one is the operator's to fix, said in one line."""
    from .hook import _as_config

    try:
        return _as_config(deployment)
    except ConfigError as exc:
        raise ConfigError(knobs.CONFIG_ENV, f"{deployment!r}: {exc}") from None


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _warm(config, device: int) -> None:
    from . import hook  # looked up at call time: the hook module's warmup is the one to run

    hook.warmup(config, device=device)


def _warm_when_device_is_set(torch, config) -> None:
    """Wrap ``torch.cuda.set_device`` once: its first call in this process warms up for the
    device it sets, then the wrapper steps aside."""
    set_device = torch.cuda.set_device

    def set_device_then_warm(device) -> None:
        set_device(device)
        if torch.cuda.set_device is set_device_then_warm:
            torch.cuda.set_device = set_device
        _warm(config, _index(torch, device))

    torch.cuda.set_device = set_device_then_warm


def _index(torch, device) -> int:
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if getattr(device, "index", None) is not None:
        return device.index
    return torch.cuda.current_device()
