"""Kernel benchmark on a GPU: prints a table and writes JSON (see docs/benchmarks.md).

Measures, in one run: device copy bandwidth, the bf16 matrix rate, the host cost of eager calls
(fast launch path vs JITFunction.run), decode scoring
(bf16/fp8, 32 heads x 128, page 64) at 64x32K, 256x8K, 8x32K columns beside a copy and a read
of the same bytes, ragged top-k k=512 vs
masked torch.topk, the full decode select, and prefill (4 x 2048 new tokens, 128K context,
ratio 4). ``--sweep`` also times alternative launch configs to tune the dispatch functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import platform
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, ".")
from kernels import (
    TopkConfig,
    decode_launch_config,
    decode_scores_launch,
    decode_tuning_configs,
    prefill_launch_config,
    prefill_logits_layout,  # noqa
    prefill_scores_launch,
    qsa_select_paged_decode,
    qsa_select_paged_prefill,
    ragged_topk,
    ragged_topk_launches,
    topk_launch_config,
)

HEADS, HEAD_DIM, PAGE = 32, 128, 64


def bench(fn, rep=200):
    """Median ms by triton.testing.do_bench: it flushes L2 before each call by zeroing 256 MB,
    which leaves up to an L2's worth of dirty lines that the timed kernel's reads write back."""
    return do_bench(fn, warmup=25, rep=rep, return_mode="median")  # ms


@functools.lru_cache(maxsize=1)
def _flush_buffer():
    return torch.ones(64 << 20, dtype=torch.int32, device="cuda")  # 256 MB


def bench_clean(fn, rep=100):
    """Median ms with L2 flushed by reading 256 MB before each call (L2 left holding clean lines
    of another buffer: the timed kernel pays its own traffic only)."""
    buf = _flush_buffer()
    fn()
    pairs = []
    for _ in range(rep + 10):
        buf.sum()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in pairs[10:])
    return times[len(times) // 2]


def bench_back_to_back(fns, rep=20):
    """Mean ms per call of ``fns`` (each over its own inputs) replayed back to back in one CUDA
    graph: the steady state of a stream of such launches, no flush between them."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    return bench(graph.replay, rep=rep) / len(fns)


def graph_bench(fn, rep=200):
    """GPU time of fn's launches, captured in one CUDA graph (no host launch overhead)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return bench(graph.replay, rep=rep)


def copy_bandwidth(clean=False):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = (bench_clean if clean else bench)(lambda: b.copy_(a))
    return 2 * n / ms / 1e9  # TB/s


def rotated_sets(buffer_bytes: int) -> int:
    """How many copies of a buffer a timing rotates through so that each call finds its input
    out of L2: up to 1 GiB of them, at most 8."""
    return max(1, min(8, (1 << 30) // buffer_bytes))


def same_size_copy_tbps(nbytes: int) -> float:
    """A device copy moving ``nbytes`` (read plus write), timed like the decode kernel."""
    n = nbytes // 2
    sets = rotated_sets(n)
    srcs = [torch.empty(n, dtype=torch.uint8, device="cuda") for _ in range(sets)]
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    copies = [lambda s=s: dst.copy_(s) for s in srcs]
    return nbytes / bench(rotating(copies)) / 1e9


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    # reads BLOCK * ITERS int32 and writes one: the read half of a copy, nothing else
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.int32)
    base = pid.to(tl.int64) * BLOCK * ITERS
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


_READ_SHAPES = ((2048, 4, 4), (4096, 4, 8), (1024, 8, 4), (8192, 2, 8))  # block, iters, warps


def same_size_read_tbps(nbytes: int, clean: bool = False) -> float:
    """What a kernel that only reads ``nbytes`` reaches, timed as the decode kernel is (inputs
    rotated past L2; ``clean``: as bench_clean times it): the best of a few tile shapes. A short
    kernel's ramp and, under do_bench's flush, the dirty lines its reads evict cost it as much
    as they cost decode scoring."""
    n = nbytes // 4
    sets = rotated_sets(nbytes)
    srcs = [torch.ones(n, dtype=torch.int32, device="cuda") for _ in range(sets)]
    best = 0.0
    for block, iters, warps in _READ_SHAPES:
        grid = (triton.cdiv(n, block * iters),)
        out = torch.empty(grid[0], dtype=torch.int32, device="cuda")
        options = dict(BLOCK=block, ITERS=iters, num_warps=warps)
        reads = [functools.partial(_read_kernel[grid], s, out, n, **options) for s in srcs]
        reads[0]()
        if int(out.sum()) != n:
            raise RuntimeError("the read kernel missed bytes")
        ms = (bench_clean if clean else bench)(rotating(reads))
        best = max(best, nbytes / ms / 1e9)
    return best


def matmul_rate():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ b)
    return 2 * 8192**3 / ms / 1e9  # TFLOP/s


REFERENCE = None  # the spec module (--reference): its decode kernel timed beside ours


def load_reference(path):
    """Import the behavioural spec (vLLM's design) for its decode kernel alone; its vLLM imports
    are stubbed (only ``tl``/``triton`` are used by the kernel)."""
    import importlib.util
    import types

    import triton.language as tl

    stubs = {
        "vllm": {},
        "vllm.model_executor": {},
        "vllm.model_executor.warmup": {},
        "vllm.utils": {},
        "vllm.envs": {},
        "vllm.model_executor.warmup.jit_warmup_triton_helper": {"TritonWarmupTensor": object},
        "vllm.platforms": {"current_platform": None},
        "vllm.triton_utils": {"tl": tl, "triton": triton},
        "vllm.utils.math_utils": {"round_up": lambda a, b: -(-a // b) * b},
    }
    for name, attrs in stubs.items():
        module = sys.modules.setdefault(name, types.ModuleType(name))
        for key, value in attrs.items():
            setattr(module, key, value)
    spec = importlib.util.spec_from_file_location("qsa_indexer_spec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_decode(q, k_cache, page_table, visible, logits):
    """The spec's decode scoring launch (dql 1) as its select function makes it."""
    ref = REFERENCE
    cols = page_table.shape[1] * k_cache.shape[1]
    tpp = ref._decode_tiles_per_program(q.shape[0], cols)
    grid = (q.shape[0], triton.cdiv(cols, 64 * tpp))

    def run():
        ref._qsa_mqa_paged_uniform_kernel[grid](
            q,
            k_cache,
            page_table,
            visible,
            logits,
            *q.stride()[:-1],
            *k_cache.stride()[:2],
            *page_table.stride()[:-1],
            *logits.stride()[:-1],
            PAGE_SIZE=k_cache.shape[1],
            PAGE_TABLE_WIDTH=page_table.shape[1],
            NUM_HEADS=q.shape[1],
            HEAD_DIM=q.shape[2],
            DECODE_QUERY_LEN=1,
            BLOCK_N=64,
            TILES_PER_PROG=tpp,
            STAGES=2,
            num_warps=1 if k_cache.dtype == torch.float8_e4m3fn else 2,
        )

    return run


def decode_inputs(reqs, columns, dtype, sets=1):
    width = columns // PAGE
    pages = max(reqs * width * sets, 1)
    k_cache = torch.randn(pages, PAGE, 1, HEAD_DIM, device="cuda").to(dtype)
    q = torch.randn(reqs, HEADS, HEAD_DIM, device="cuda").to(dtype)
    perm = torch.randperm(pages, device="cuda").to(torch.int32)
    tables = [
        perm[i * reqs * width : (i + 1) * reqs * width].view(reqs, width) for i in range(sets)
    ]
    visible = torch.full((reqs,), columns, dtype=torch.int32, device="cuda")
    return q, k_cache, tables, visible


def precompile(launches, threads=12):
    """Compile sweep variants side by side before timing them (Triton releases the GIL in its
    MLIR passes and ptxas is a subprocess); a variant that fails here is retried when timed."""
    import concurrent.futures

    def build(launch):
        try:
            launch.warmup()
        except Exception:  # noqa: BLE001 - reported when the variant is timed
            pass

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(build, launches))


def rotating(fns):
    state = {"i": 0}

    def call():
        fns[state["i"] % len(fns)]()
        state["i"] += 1

    return call


def decode_case(reqs, columns, dtype, sweep):
    elem = torch.empty((), dtype=dtype).element_size()
    sets = rotated_sets(reqs * columns * HEAD_DIM * elem)
    q, k_cache, tables, visible = decode_inputs(reqs, columns, dtype, sets)
    logits = torch.empty(reqs, columns, device="cuda")
    bytes_moved = (
        reqs * columns * (HEAD_DIM * k_cache.element_size() + 4)
        + reqs * HEADS * HEAD_DIM * q.element_size()
    )
    base = decode_launch_config(dtype, HEADS, HEAD_DIM, 1, reqs, columns)

    def timed(cfg, rep=200):
        launches = [
            decode_scores_launch(q, k_cache, t, visible, logits, 1, config=cfg) for t in tables
        ]
        return bench(rotating([launch.run for launch in launches]), rep=rep)

    runs = [
        decode_scores_launch(q, k_cache, t, visible, logits, 1, config=base).run for t in tables
    ]
    ms = bench(rotating(runs))
    clean_ms = bench_clean(rotating(runs))
    b2b_ms = bench_back_to_back(runs)
    result = {
        "reqs": reqs,
        "columns": columns,
        "dtype": str(dtype).split(".")[-1],
        "ms": ms,
        "tbps": bytes_moved / ms / 1e9,
        "same_size_copy_tbps": same_size_copy_tbps(bytes_moved),
        "same_size_read_tbps": same_size_read_tbps(bytes_moved),
        "same_size_read_clean_tbps": same_size_read_tbps(bytes_moved, clean=True),
        "clean_ms": clean_ms,
        "clean_tbps": bytes_moved / clean_ms / 1e9,
        "b2b_ms": b2b_ms,
        "b2b_tbps": bytes_moved / b2b_ms / 1e9,
        "config": dataclasses.asdict(base),
    }
    if REFERENCE is not None:  # the spec's kernel, same inputs, same three timings
        refs = [reference_decode(q, k_cache, t, visible, logits) for t in tables]
        result["reference"] = {
            "tbps": bytes_moved / bench(rotating(refs)) / 1e9,
            "clean_tbps": bytes_moved / bench_clean(rotating(refs)) / 1e9,
            "b2b_tbps": bytes_moved / bench_back_to_back(refs) / 1e9,
        }
    if sweep:
        configs = list(decode_tuning_configs(base).values())
        precompile(
            [
                decode_scores_launch(q, k_cache, tables[0], visible, logits, 1, config=cfg)
                for cfg in configs
            ]
        )
        trials = []
        for cfg in configs:
            label = (cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.tiles_per_program)
            try:
                trials.append((timed(cfg, rep=50), *label))
            except Exception as exc:  # noqa: BLE001 - a config may not fit
                trials.append((float("inf"), *label, str(exc)[:80]))
        trials.sort()
        result["sweep_best"] = [
            dict(
                ms=t[0],
                tbps=bytes_moved / t[0] / 1e9,
                block_n=t[1],
                warps=t[2],
                stages=t[3],
                tpp=t[4],
            )
            for t in trials[:6]
        ]
    return result, (q, k_cache, tables[0], visible, logits)


def topk_case(logits, visible, k, sweep):
    rows, cols = logits.shape
    torch.manual_seed(0)
    logits.copy_(torch.rand_like(logits))
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    ours = bench(lambda: ragged_topk(logits, visible, k, out))
    col = torch.arange(cols, device="cuda")

    def masked_torch():
        masked = logits.masked_fill(col[None, :] >= visible[:, None], float("-inf"))
        return torch.topk(masked, k, dim=1)

    theirs = bench(masked_torch)
    got = logits.gather(1, out.long()).sort(dim=1, descending=True).values
    exact = bool(torch.equal(got, masked_torch().values.sort(dim=1, descending=True).values))
    result = {
        "rows": rows,
        "cols": cols,
        "k": k,
        "ms": ours,
        "torch_topk_ms": theirs,
        "ratio": ours / theirs,
        "exact": exact,
    }
    result["path"] = topk_launch_config(cols, k, rows).path
    # GPU time alone (host launch overhead removed): each side's launches in one CUDA graph
    result["graph_ms"] = graph_bench(lambda: ragged_topk(logits, visible, k, out))
    result["torch_graph_ms"] = graph_bench(masked_torch)
    result["graph_ratio"] = result["graph_ms"] / result["torch_graph_ms"]
    if sweep:
        trials = []

        def trial(cfg, *label):
            def run():
                for launch in ragged_topk_launches(logits, visible, k, out, config=cfg):
                    launch.run()

            try:
                ms = graph_bench(run, rep=100)
                got_cfg = logits.gather(1, out.long()).sort(dim=1, descending=True).values
                trials.append((ms, *label, bool(torch.equal(got_cfg, want))))
            except Exception as exc:  # noqa: BLE001
                trials.append((float("inf"), *label, str(exc)[:80]))

        want = masked_torch().values.sort(dim=1, descending=True).values
        one_row = (
            TopkConfig("streaming", 8192, 16, 1024)
            if cols > 32768
            else TopkConfig("single", max(1024, triton.next_power_of_2(cols)), 16, 1024)
        )
        cands = topk_launch_config(cols, k).candidates or 2048
        configs = [
            (dataclasses.replace(one_row, num_warps=warps), "per-row", "bisect", warps)
            for warps in (8, 16, 32)
        ]
        configs += [
            (
                TopkConfig(
                    "split",
                    chunk,
                    warps,
                    0,
                    candidates=cands,
                    collect_warps=collect_warps,
                    group=topk_launch_config(cols, k, rows).group,
                ),
                "split",
                chunk,
                warps,
                cands,
                collect_warps,
            )
            for chunk in (1024, 2048, 4096, 8192)
            for warps in (4, 8, 16)
            for collect_warps in (4, 8, 16)
        ]
        precompile(
            [
                launch
                for cfg, *_ in configs
                for launch in ragged_topk_launches(logits, visible, k, out, config=cfg)
            ]
        )
        for cfg, *label in configs:
            trial(cfg, *label)
        result["sweep"] = sorted(trials, key=lambda t: t[0])
    return result


def host_per_call_us(fn, calls=2000):
    """Wall time per call of ``fn`` called back to back (one synchronization at the end): for
    calls whose GPU work is shorter than their host work, the host cost of one eager call."""
    import time

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_cases():
    """Host cost of eager calls, on the fast launch path and through ``JITFunction.run``
    every time (``triton_launches_only``), side by side."""
    from kernels._fast_launch import triton_launches_only

    cases = []
    for name, reqs, cols in (("decode select", 1, 2048), ("decode select", 64, 32768)):
        q, k_cache, tables, visible = decode_inputs(reqs, cols, torch.bfloat16)
        out = torch.empty(reqs, 512, dtype=torch.int32, device="cuda")
        cases.append(
            (
                f"{name} bf16 {reqs}x{cols}",
                lambda q=q, k=k_cache, t=tables[0], v=visible, o=out: qsa_select_paged_decode(
                    q, k, t, v, 2048, 4, 1, o
                ),
            )
        )
    for rows, cols in ((1, 2048), (64, 32768)):
        logits = torch.rand(rows, cols, device="cuda")
        lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        out = torch.empty(rows, 512, dtype=torch.int32, device="cuda")
        cases.append(
            (
                f"ragged_topk {rows}x{cols} k=512",
                lambda x=logits, n=lengths, o=out: ragged_topk(x, n, 512, o),
            )
        )
    results = []
    for name, fn in cases:
        fast_us = host_per_call_us(fn)
        with triton_launches_only():
            triton_us = host_per_call_us(fn)
        results.append(
            {
                "case": name,
                "fast_us": fast_us,
                "triton_us": triton_us,
                "graph_us": graph_bench(fn) * 1e3,
            }
        )
        print(
            f"host {name}: {fast_us:.1f} us a call (through JITFunction.run {triton_us:.1f}; "
            f"its CUDA graph {results[-1]['graph_us']:.1f} us)",
            flush=True,
        )
    return results


def prefill_case(dtype, sweep, reqs=4, new_tokens=2048, context=131072, ratio=4, heads=HEADS):
    columns = context // ratio
    width = columns // PAGE
    pages = reqs * width
    k_cache = torch.randn(pages, PAGE, 1, HEAD_DIM, device="cuda").to(dtype)
    rows = reqs * new_tokens
    q = torch.randn(rows, heads, HEAD_DIM, device="cuda").to(dtype)
    page_table = torch.randperm(pages, device="cuda").to(torch.int32).view(reqs, width)
    qsl = torch.arange(0, rows + 1, new_tokens, dtype=torch.int32, device="cuda")
    positions = (context - new_tokens + torch.arange(new_tokens, device="cuda")).repeat(reqs)
    visible = ((positions + 1) // ratio).to(torch.int32)
    flops = float(visible.double().sum()) * heads * HEAD_DIM * 2
    logits_width, stride, rows_per_chunk = prefill_logits_layout(context, ratio, columns, 512)
    chunk = min(rows, rows_per_chunk)
    logits = torch.empty(chunk, stride, device="cuda")[:, :logits_width]
    base = prefill_launch_config(dtype, heads, HEAD_DIM)

    def scoring(cfg):
        launches = [
            prefill_scores_launch(
                q,
                k_cache,
                page_table,
                qsl,
                visible,
                logits[: min(chunk, rows - s)],
                new_tokens,
                s,
                min(chunk, rows - s),
                logits_width,
                config=cfg,
            )
            for s in range(0, rows, chunk)
        ]
        return lambda: [launch.run() for launch in launches]

    ms = bench(scoring(base), rep=300)
    out = torch.empty(rows, 2048 // ratio, dtype=torch.int32, device="cuda")
    select_ms = bench(
        lambda: qsa_select_paged_prefill(
            q, k_cache, page_table, qsl, visible, 2048, ratio, new_tokens, out, context
        ),
        rep=300,
    )
    result = {
        "dtype": str(dtype).split(".")[-1],
        "heads": heads,
        "scoring_ms": ms,
        "tflops": flops / ms / 1e9,
        "select_ms": select_ms,
        "config": dataclasses.asdict(base),
    }
    if dtype == torch.bfloat16:  # the prefill select's top-k on one logits chunk
        result["topk_chunk"] = topk_case(logits, visible[:chunk].contiguous(), 2048 // ratio, sweep)
    if sweep:
        trials = []
        for tile_r in (4, 8, 16):
            for warps in (4, 8):
                for stages in (2,):
                    for acc in (32, 128) if dtype == torch.float8_e4m3fn else (0,):
                        hp = base.heads_pad
                        cfg = dataclasses.replace(
                            base,
                            tile_r=tile_r,
                            num_warps=warps,
                            num_stages=stages,
                            imprecise_acc=acc,
                        )
                        if tile_r * hp > 512:
                            continue
                        try:
                            t = bench(scoring(cfg), rep=100)
                        except Exception:  # noqa: BLE001
                            t = float("inf")
                        trials.append((t, tile_r, warps, stages, acc))
        trials.sort()
        result["sweep_best"] = [
            dict(
                ms=t[0],
                tflops=flops / t[0] / 1e9,
                tile_r=t[1],
                warps=t[2],
                stages=t[3],
                imprecise_acc=t[4],
            )
            for t in trials[:6]
        ]
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="bench_kernels.json")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument(
        "--reference", help="path of qsa_indexer_spec.py: time its decode kernel beside ours"
    )
    args = parser.parse_args()
    global REFERENCE
    if args.reference:
        REFERENCE = load_reference(args.reference)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    report["copy_tbps"] = copy_bandwidth()
    report["copy_clean_tbps"] = copy_bandwidth(clean=True)
    report["bf16_matmul_tflops"] = matmul_rate()
    print(
        f"copy {report['copy_tbps']:.2f} TB/s (clean L2 {report['copy_clean_tbps']:.2f})   bf16 "
        f"matmul {report['bf16_matmul_tflops']:.0f} TFLOP/s",
        flush=True,
    )
    report["host"] = host_cases()
    save(report, args.json)
    report["decode"], report["topk"], report["select"] = [], [], []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        for reqs, cols in ((64, 32768), (256, 8192), (8, 32768)):
            res, (q, k_cache, table, visible, logits) = decode_case(
                reqs, cols, dtype, args.sweep and reqs != 256
            )
            res["of_copy"] = res["tbps"] / report["copy_tbps"]
            res["clean_of_copy"] = res["clean_tbps"] / report["copy_clean_tbps"]
            report["decode"].append(res)
            ref = res.get("reference")
            print(
                f"decode {res['dtype']:>13} {reqs:>4}x{cols:<6} {res['ms'] * 1e3:8.1f} us "
                f"{res['tbps']:.2f} TB/s "
                f"({res['of_copy']:.0%} of copy, "
                f"{res['tbps'] / res['same_size_copy_tbps']:.0%} of a same-size copy, "
                f"{res['tbps'] / res['same_size_read_tbps']:.0%} of a same-size read); "
                f"clean L2 {res['clean_tbps']:.2f} TB/s "
                f"({res['clean_of_copy']:.0%}; "
                f"{res['clean_tbps'] / res['same_size_read_clean_tbps']:.0%} of a same-size read); "
                f"back to back {res['b2b_tbps']:.2f} TB/s"
                + (
                    f"; spec kernel {ref['tbps']:.2f} / {ref['clean_tbps']:.2f} / "
                    f"{ref['b2b_tbps']:.2f}"
                    if ref
                    else ""
                ),
                res.get("sweep_best", [None])[0],
                flush=True,
            )
            if dtype == torch.bfloat16:
                t = topk_case(logits, visible, 512, args.sweep)
                report["topk"].append(t)
                print(
                    f"topk {reqs}x{cols} k=512 {t['ms'] * 1e3:.1f} us vs torch.topk "
                    f"{t['torch_topk_ms'] * 1e3:.1f} us "
                    f"= {t['ratio']:.2f}x; in CUDA graphs {t['graph_ms'] * 1e3:.1f} vs "
                    f"{t['torch_graph_ms'] * 1e3:.1f} us "
                    f"= {t['graph_ratio']:.2f}x; exact={t['exact']}",
                    t.get("sweep", [])[:8],
                    flush=True,
                )
            out = torch.empty(reqs, 512, dtype=torch.int32, device="cuda")

            def select(q=q, k_cache=k_cache, table=table, visible=visible, out=out):
                qsa_select_paged_decode(q, k_cache, table, visible, 2048, 4, 1, out)

            ms, graph_ms = bench(select), graph_bench(select)
            report["select"].append(
                {"dtype": res["dtype"], "reqs": reqs, "cols": cols, "ms": ms, "graph_ms": graph_ms}
            )
            print(
                f"select {res['dtype']} {reqs}x{cols} {ms * 1e3:.1f} us (in a CUDA graph "
                f"{graph_ms * 1e3:.1f} us)",
                flush=True,
            )
            save(report, args.json)
            del q, k_cache, table, visible, logits
            torch.cuda.empty_cache()
    report["prefill"] = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        p = prefill_case(dtype, args.sweep)
        p["of_matmul"] = p["tflops"] / report["bf16_matmul_tflops"]
        report["prefill"].append(p)
        save(report, args.json)
        print(
            f"prefill {p['dtype']} scoring {p['scoring_ms']:.2f} ms {p['tflops']:.0f} TFLOP/s "
            f"({p['of_matmul']:.0%} of bf16 matmul), select {p['select_ms']:.2f} ms",
            p.get("sweep_best"),
            flush=True,
        )
    save(report, args.json)


def save(report, path):
    """Write the report so far (a run cut short by a time limit still leaves its numbers)."""
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
