#!/usr/bin/env bash
# What issue 18's targets need from one GPU, in one call: the GPU tests (fast launch path,
# CUDA-graph capture, full-size top-k), the host cost of eager calls and every kernel case
# (tools/bench_kernels.py, side by side with masked torch.topk and the copy ceiling), the split
# top-k's choices by row count (tools/bench_topk_rows.py: search, chunk, warps, finishing), and
# the zero-JIT sweep after a warmup (check --trace). Results under OUTDIR.
# Usage: tools/h200_kernels_proof.sh OUTDIR [--sweep]
set -u
out=${1:?outdir}; sweep=${2:-}
mkdir -p "$out"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null || true
python3 -m pytest -q -m gpu tests > "$out/gpu_tests.txt" 2>&1
python3 tools/bench_kernels.py --json "$out/kernels.json" $sweep > "$out/kernels.txt" 2>&1
python3 tools/bench_topk_rows.py --json "$out/topk_rows.json" > "$out/topk_rows.txt" 2>&1
cache=$(mktemp -d /tmp/qsa-kernels-XXXX)
python3 -m qsa_warmup prebuild --cache-dir "$cache" > "$out/prebuild.txt" 2>&1
python3 -m qsa_warmup check --cache-dir "$cache" --trace > "$out/check_trace.txt" 2>&1
tail -n 3 "$out"/*.txt
