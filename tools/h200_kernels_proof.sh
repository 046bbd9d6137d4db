#!/usr/bin/env bash
# What issue 18's targets need from one GPU. Parts (default: all, in this order):
#   tests   the GPU tests (fast launch path, CUDA-graph capture, full-size top-k designs)
#   kernels tools/bench_kernels.py: host cost of eager calls (fast path vs JITFunction.run) and
#           every kernel case side by side with masked torch.topk and the copy ceiling, the
#           undispatched top-k designs beside each split case (SWEEP=1 adds --sweep)
#   rows    tools/bench_topk_rows.py: the many-program top-k's choices by row count
#   trace   prebuild, then the zero-JIT sweep (check --trace)
# All parts together can pass one device call's 10 minutes: run them over two calls if so.
# Results under OUTDIR; each tool writes its JSON as it goes.
# Usage: tools/h200_kernels_proof.sh OUTDIR [PART ...]
set -u
out=${1:?outdir}; shift
parts=${*:-tests kernels rows trace}
mkdir -p "$out"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null || true
for part in $parts; do
  start=$(date +%s)
  case $part in
    tests) python3 -m pytest -q -m gpu tests > "$out/gpu_tests.txt" 2>&1 ;;
    kernels) python3 tools/bench_kernels.py --json "$out/kernels.json" ${SWEEP:+--sweep} \
               > "$out/kernels.txt" 2>&1 ;;
    rows) python3 tools/bench_topk_rows.py --json "$out/topk_rows.json" > "$out/topk_rows.txt" 2>&1 ;;
    trace)
      cache=$(mktemp -d /tmp/qsa-kernels-XXXX)
      python3 -m qsa_warmup prebuild --cache-dir "$cache" > "$out/prebuild.txt" 2>&1
      python3 -m qsa_warmup check --cache-dir "$cache" --trace > "$out/check_trace.txt" 2>&1 ;;
    *) echo "unknown part: $part (tests, kernels, rows, trace)" >&2; exit 2 ;;
  esac
  echo "$part: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/parts.txt"
done
