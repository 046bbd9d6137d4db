"""QSA sparse-attention indexer ops in Triton, with the dispatch functions that choose every launch.

The public ops keep the signatures of the QSA indexer specification; the ``*_launch_config``
functions and the ``*_launch`` builders are what the warmup planner calls to learn exactly
which variants the ops can request.
"""

import importlib

# Each public name, by the module that defines it. Imported on first use (PEP 562), so that
# ``kernels.limits`` (plain constants, read by configs and the CLI) loads without torch/Triton.
_SOURCES = {
    "_launch": ("KernelLaunch", "TensorMeta", "assume_arch", "interpreting"),
    "decode": (
        "DecodeConfig",
        "decode_launch_config",
        "decode_scores_launch",
        "decode_tuning_configs",
        "decode_tile_shape",
        "decode_tiles_per_program",
        "qsa_paged_decode_scores",
        "qsa_select_paged_decode",
    ),
    "expand": ("ExpandConfig", "expand_launch", "expand_launch_config", "expand_qsa_block_indices"),
    "prefill": (
        "DEFAULT_MAX_LOGITS_MB",
        "SHARED_MEMORY_BUDGET",
        "PrefillConfig",
        "prefill_launch_config",
        "prefill_logits_layout",
        "prefill_scores_launch",
        "qsa_select_paged_prefill",
    ),
    "topk": (
        "SINGLE_PASS_MAX_COLS",
        "SPLIT_FINISH_APART_MIN_ROWS",
        "SPLIT_MANY_ROWS_MIN_COLS",
        "SPLIT_MIN_COLS",
        "COOP_MAX_PARTS",
        "COOP_MAX_PROGRAMS",
        "TopkConfig",
        "ragged_topk",
        "ragged_topk_launch",
        "ragged_topk_launches",
        "topk_launch_config",
        "topk_row_thresholds",
        "topk_tuning_configs",
    ),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = [
    "qsa_select_paged_decode",
    "qsa_select_paged_prefill",
    "expand_qsa_block_indices",
    "ragged_topk",
    "qsa_paged_decode_scores",
    "assume_arch",
    "decode_launch_config",
    "decode_tile_shape",
    "decode_tiles_per_program",
    "prefill_launch_config",
    "prefill_logits_layout",
    "topk_launch_config",
    "topk_row_thresholds",
    "topk_tuning_configs",
    "decode_tuning_configs",
    "expand_launch_config",
    "decode_scores_launch",
    "prefill_scores_launch",
    "ragged_topk_launch",
    "ragged_topk_launches",
    "expand_launch",
    "DecodeConfig",
    "PrefillConfig",
    "TopkConfig",
    "ExpandConfig",
    "KernelLaunch",
    "TensorMeta",
    "interpreting",
    "DEFAULT_MAX_LOGITS_MB",
    "SHARED_MEMORY_BUDGET",
    "SINGLE_PASS_MAX_COLS",
    "SPLIT_MIN_COLS",
    "SPLIT_FINISH_APART_MIN_ROWS",
    "SPLIT_MANY_ROWS_MIN_COLS",
    "COOP_MAX_PROGRAMS",
    "COOP_MAX_PARTS",
]
