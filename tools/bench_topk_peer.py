"""``ragged_topk`` beside the peer a user would pick instead: FlashInfer's
``top_k_ragged_transform`` (same contract: per-row lengths, int32 indices, -1 fill; offsets 0),
and masked ``torch.topk``, in one process, each timed in a CUDA graph (GPU-only; FlashInfer is
optional and never a dependency of the package or of CI: without it the tool says so and times
the other two).

Shapes: the kernel issue's table (rows x columns, k); normal logits unless ``--logits`` names
another kind of ``tools/ab_topk.py`` (``relu8``: the indexer's kind). Each result is checked
exact (tie-aware: the selected values equal the row's k largest) before it is timed. Usage:
    python tools/bench_topk_peer.py [--json FILE] [--shapes ROWSxCOLSxK,...] [--logits normal]
"""

from __future__ import annotations

import argparse
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
from ab_topk import LOGITS, make_logits, parse_shapes  # noqa: E402
from bench_kernels import graph_bench, save  # noqa: E402

from kernels import ragged_topk  # noqa: E402

SHAPES = [(64, 32768, 512), (8, 32768, 512), (256, 8192, 512), (64, 131072, 2048)]


def _peer():
    """FlashInfer's ``top_k_ragged_transform``, or None. FlashInfer's package ``__init__``
    imports every op family and their optional dependencies; where that fails, its top-k module
    is imported alone (the package's ``__init__`` skipped): the op and its build are the same."""
    try:
        import flashinfer

        return flashinfer.top_k_ragged_transform
    except ImportError as exc:
        whole = exc
    try:
        return _flashinfer_topk_alone().top_k_ragged_transform
    except ImportError as exc:
        print(
            f"flashinfer not importable ({whole}; its top-k alone: {exc}): timing ragged_topk "
            "and torch.topk only"
        )
        return None


def _flashinfer_topk_alone():
    import importlib
    import importlib.util
    import os
    import types

    for name in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
        del sys.modules[name]  # what the failed import left half-initialized
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or spec.origin is None:
        raise ImportError("no module named 'flashinfer'")
    package = types.ModuleType("flashinfer")
    package.__file__ = spec.origin
    package.__path__ = [os.path.dirname(spec.origin)]
    sys.modules["flashinfer"] = package
    return importlib.import_module("flashinfer.topk")


def _exact(indices, logits, lengths, k) -> bool:
    cols = torch.arange(logits.shape[1], device="cuda")
    masked = logits.masked_fill(cols >= lengths[:, None].long(), float("-inf"))
    want = masked.topk(k, dim=1).values
    got = masked.gather(1, indices.long().clamp(min=0)).sort(dim=1, descending=True).values
    return bool(torch.equal(got, want))


def _case(peer, rows: int, cols: int, k: int, kind: str = "normal") -> dict:
    torch.manual_seed(rows + cols)
    logits = make_logits(kind, rows, cols, "cuda")
    lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
    offsets = torch.zeros(rows, dtype=torch.int32, device="cuda")
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    ours = graph_bench(lambda: ragged_topk(logits, lengths, k, out))
    case = {"rows": rows, "cols": cols, "k": k, "ragged_topk_us": ours * 1e3}
    case["ragged_topk_exact"] = _exact(out, logits, lengths, k)
    case["torch_topk_us"] = graph_bench(lambda: torch.topk(logits, k, dim=1)) * 1e3
    if peer is not None:
        got = peer(logits, offsets, lengths, k)
        case["flashinfer_exact"] = _exact(got, logits, lengths, k)
        case["flashinfer_us"] = graph_bench(lambda: peer(logits, offsets, lengths, k)) * 1e3
    return case


def _usable(peer):
    """``peer``, or None when its first call fails (FlashInfer builds its CUDA module on first
    use, which needs its sources and nvcc): said in one line, and the others are still timed."""
    if peer is None:
        return None
    logits = torch.randn(2, 16384, device="cuda")
    lengths = torch.full((2,), 16384, dtype=torch.int32, device="cuda")
    try:
        peer(logits, torch.zeros_like(lengths), lengths, 64)
        torch.cuda.synchronize()
    except Exception as exc:  # whatever FlashInfer's loader raises: the bench goes on without it
        print(f"flashinfer's top-k did not run ({type(exc).__name__}: {exc}): timing the others")
        return None
    return peer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="bench_topk_peer.json")
    parser.add_argument(
        "--shapes",
        default=",".join(f"{r}x{c}x{k}" for r, c, k in SHAPES),
        help="ROWSxCOLSxK, comma-separated (default: the kernel issue's table)",
    )
    parser.add_argument("--logits", default="normal", choices=LOGITS, help="their kind")
    args = parser.parse_args()
    shapes = parse_shapes(args.shapes)
    if not shapes:
        parser.error(
            f"--shapes {args.shapes!r}: give ROWSxCOLSxK, comma-separated, e.g. 64x32768x512"
        )
    peer = _usable(_peer())
    report = {
        "gpu": torch.cuda.get_device_name(),
        "flashinfer": peer is not None,
        "logits": args.logits,
        "cases": [],
    }
    for rows, cols, k in shapes:
        case = _case(peer, rows, cols, k, args.logits)
        report["cases"].append(case)
        print(
            f"{rows:>5} x {cols:<6} k={k:<5} ragged_topk {case['ragged_topk_us']:7.1f} us "
            f"torch.topk {case['torch_topk_us']:7.1f} us"
            + (f" flashinfer {case['flashinfer_us']:7.1f} us" if peer is not None else "")
            + f" exact: ours {case['ragged_topk_exact']}"
            + (f" flashinfer {case['flashinfer_exact']}" if peer is not None else ""),
            flush=True,
        )
        save(report, args.json)


if __name__ == "__main__":
    main()
