"""Decode scoring's launch choices for one batch shape, side by side (GPU; tunes
``decode_launch_config``). Every config of ``kernels.decode_tuning_configs`` (tile shapes,
warps, pipeline depths and tiles per program: the grid ``bench_kernels.py --sweep`` weighs
too) is timed as ``tools/bench_kernels.py`` times the dispatched one (median of do_bench, key
caches rotated past L2), next to a copy of the same bytes and a copy of 1 GiB; each config's
scores are checked against the dispatched config's (close: accumulation order may differ).

    python tools/bench_decode_sweep.py [--shape 8x32768] [--dtypes bf16,fp8] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
from bench_kernels import (  # noqa: E402
    HEAD_DIM,
    HEADS,
    bench,
    copy_bandwidth,
    decode_inputs,
    precompile,
    rotated_sets,
    rotating,
    same_size_copy_tbps,
    save,
)

from kernels import decode_launch_config, decode_scores_launch, decode_tuning_configs  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


def sweep(reqs, cols, dtype):
    elem = torch.empty((), dtype=dtype).element_size()
    sets = rotated_sets(reqs * cols * HEAD_DIM * elem)
    q, k_cache, tables, visible = decode_inputs(reqs, cols, dtype, sets)
    logits = torch.empty(reqs, cols, device="cuda")
    moved = reqs * cols * (HEAD_DIM * elem + 4) + reqs * HEADS * HEAD_DIM * q.element_size()
    base = decode_launch_config(dtype, HEADS, HEAD_DIM, 1, reqs, cols)
    named = decode_tuning_configs(base)
    precompile(
        [
            decode_scores_launch(q, k_cache, tables[0], visible, logits, 1, config=cfg)
            for cfg in named.values()
        ]
    )
    decode_scores_launch(q, k_cache, tables[0], visible, logits, 1, config=base).run()
    want = logits.clone()
    rows = []
    for name, cfg in named.items():
        launches = [
            decode_scores_launch(q, k_cache, t, visible, logits, 1, config=cfg) for t in tables
        ]
        try:
            logits.fill_(float("nan"))
            launches[0].run()
            # accumulation order may differ between tile shapes: close, and every column written
            same = bool(torch.allclose(logits, want, rtol=1e-3, atol=1e-2))
            ms = bench(rotating([launch.run for launch in launches]), rep=100)
        except Exception as exc:  # noqa: BLE001 - a config may not fit
            rows.append({"name": name, "error": str(exc)[:120]})
            continue
        rows.append(
            {
                "name": name,
                "us": ms * 1e3,
                "tbps": moved / ms / 1e9,
                "same_as_dispatched": same,
                "grid": list(launches[0].grid),
                "config": dataclasses.asdict(cfg),
            }
        )
    return {
        "reqs": reqs,
        "cols": cols,
        "dtype": str(dtype).split(".")[-1],
        "bytes": moved,
        "same_size_copy_tbps": same_size_copy_tbps(moved),
        "rows": rows,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8x32768", help="REQUESTSxCOLUMNS")
    parser.add_argument("--dtypes", default="bf16,fp8")
    parser.add_argument("--json", default="bench_decode_sweep.json")
    args = parser.parse_args()
    reqs, cols = (int(x) for x in args.shape.lower().split("x"))
    report = {"gpu": torch.cuda.get_device_name(), "copy_tbps": copy_bandwidth(), "cases": []}
    for name in args.dtypes.split(","):
        case = sweep(reqs, cols, DTYPES[name])
        report["cases"].append(case)
        save(report, args.json)
        timed = sorted((r for r in case["rows"] if "us" in r), key=lambda r: r["us"])
        dispatched = next(r for r in case["rows"] if r["name"] == "dispatched")
        print(
            f"{name} {reqs}x{cols}: copy 1 GiB {report['copy_tbps']:.2f} TB/s, same-size copy "
            f"{case['same_size_copy_tbps']:.2f} TB/s; dispatched {dispatched.get('us', 0):.1f} us "
            f"{dispatched.get('tbps', 0):.2f} TB/s",
            flush=True,
        )
        for r in timed[:12]:
            print(
                f"  {r['name']:>24} {r['us']:7.1f} us {r['tbps']:.2f} TB/s "
                f"grid {r['grid']} same={r['same_as_dispatched']}",
                flush=True,
            )
        bad = [r["name"] for r in case["rows"] if r.get("same_as_dispatched") is False]
        errors = [r["name"] for r in case["rows"] if "error" in r]
        print(f"  differing scores: {bad or 'none'}; failed: {errors or 'none'}", flush=True)


if __name__ == "__main__":
    main()
