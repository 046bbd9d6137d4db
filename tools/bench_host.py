"""Host cost of eager calls, measurable without a GPU (see docs/benchmarks.md).

Runs the ops on CPU tensors with Triton's binder and compiler for sm_90 (the offline driver)
and every compiled kernel's launcher replaced by a no-op: what is timed is everything an eager
call does on the host except the C launcher itself and CUDA's allocator. Each case runs on the
fast launch path and through ``JITFunction.run`` every time (``triton_launches_only``), side by
side. ``--profile CASE`` prints the top of a cProfile of that case.

    python3 tools/bench_host.py [--json host.json] [--calls 3000] [--profile "decode select 1x2048"]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)  # before Triton is imported: compiled mode
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.compiler  # noqa: E402

from kernels import qsa_select_paged_decode, qsa_select_paged_prefill, ragged_topk  # noqa: E402
from kernels._fast_launch import triton_launches_only  # noqa: E402
from qsa_warmup.triton_compat.targets import active_driver, parse_target  # noqa: E402

HEADS, HEAD_DIM, PAGE = 32, 128, 64


def _no_launch(*args):
    return None


def _compile_without_launcher(real_compile):
    """Triton's compile, its result given a no-op launcher (there is no GPU to load it on)."""

    def compile(*args, **kwargs):
        kernel = real_compile(*args, **kwargs)
        kernel.module = "no module: launches are not made"  # _init_handles then returns at once
        kernel.function = 0
        kernel._run = _no_launch
        return kernel

    return compile


def cases():
    """(name, call) pairs, each built when the caller gets to it."""
    out = []
    for reqs, cols in ((1, 2048), (64, 32768)):
        k_cache = torch.randn(reqs * cols // PAGE, PAGE, 1, HEAD_DIM).to(torch.bfloat16)
        q = torch.randn(reqs, HEADS, HEAD_DIM).to(torch.bfloat16)
        table = torch.arange(reqs * cols // PAGE, dtype=torch.int32).view(reqs, -1)
        visible = torch.full((reqs,), cols, dtype=torch.int32)
        selected = torch.empty(reqs, 512, dtype=torch.int32)
        out.append(
            (
                f"decode select {reqs}x{cols}",
                lambda q=q, k=k_cache, t=table, v=visible, o=selected: qsa_select_paged_decode(
                    q, k, t, v, 2048, 4, 1, o
                ),
            )
        )
        logits = torch.rand(reqs, cols)
        topk = torch.empty(reqs, 512, dtype=torch.int32)
        out.append(
            (
                f"ragged_topk {reqs}x{cols}",
                lambda x=logits, n=visible, o=topk: ragged_topk(x, n, 512, o),
            )
        )
    yield from out
    # built after the small cases ran: holding its ~100 MB of inputs slows the small cases'
    # own allocations on the CPU (2x at 1 x 2K), which CUDA's caching allocator would not
    yield "prefill select 4x2048 @ 128K", _prefill_select()


def _prefill_select(reqs=4, new_tokens=2048, context=131072, ratio=4):
    """tools/bench_kernels.py's prefill case (bf16): two 4096-row chunks, each scored and then
    selected by a split top-k."""
    width = context // ratio // PAGE
    k_cache = torch.empty(reqs * width, PAGE, 1, HEAD_DIM, dtype=torch.bfloat16)
    q = torch.empty(reqs * new_tokens, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    table = torch.arange(reqs * width, dtype=torch.int32).view(reqs, width)
    qsl = torch.arange(0, reqs * new_tokens + 1, new_tokens, dtype=torch.int32)
    positions = (context - new_tokens + torch.arange(new_tokens)).repeat(reqs)
    visible = ((positions + 1) // ratio).to(torch.int32)
    out = torch.empty(reqs * new_tokens, 2048 // ratio, dtype=torch.int32)
    return lambda: qsa_select_paged_prefill(
        q, k_cache, table, qsl, visible, 2048, ratio, new_tokens, out, context
    )


def per_call_us(fn, calls):
    best = float("inf")
    for _ in range(3):  # best of three rounds: the box's other load only adds
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def profile(fn, calls):
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="bench_host.json")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--profile", metavar="CASE", help="cProfile one case by name")
    args = parser.parse_args()
    triton.compiler.compile = _compile_without_launcher(triton.compiler.compile)
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cases": [],
    }
    with active_driver(parse_target("sm_90")):
        for name, fn in cases():
            fn()  # compile (or load from Triton's cache) and bind
            with triton_launches_only():
                fn()
            if args.profile:
                if name == args.profile:
                    profile(fn, args.calls)
                continue
            fast = per_call_us(fn, args.calls)
            with triton_launches_only():
                through_triton = per_call_us(fn, args.calls)
            report["cases"].append({"case": name, "fast_us": fast, "triton_us": through_triton})
            print(
                f"{name:28} fast path {fast:6.1f} us   through JITFunction.run "
                f"{through_triton:6.1f} us   ({fast / through_triton:.2f}x)",
                flush=True,
            )
    if not args.profile:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
