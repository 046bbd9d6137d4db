#!/bin/bash
# One GPU call: the collect launch's prefix sum over rows of 16 keys (the tree) against the
# chunk-wide one (prefix1d), rows of 32, and the sampled bound on top (sample4); the GPU tests on
# the tree; the FlashInfer peer; bench_kernels.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
AB_SHAPES=4096x32768x512,1024x32768x512,4096x8192x512,2048x8192x512,256x8192x512,64x32768x512,64x131072x2048,8x32768x512 \
  timeout 200 python3 scratch/ab_variants.py prefix1d rows32 sample4 > $OUT/ab_rows.txt 2>&1; tail -18 $OUT/ab_rows.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_topk.py tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
echo "== $(( $(date +%s)-t0 )) s"
PYTHONPATH=.carry/fi timeout 90 python3 tools/bench_topk_peer.py --json $OUT/topk_peer.json --shapes 64x32768x512,8x32768x512,256x8192x512,64x131072x2048,1x16384x512,16x32768x512 > $OUT/topk_peer.txt 2>&1; tail -8 $OUT/topk_peer.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 120 python3 tools/bench_kernels.py --json $OUT/bench_kernels.json > $OUT/bench_kernels.txt 2>&1; tail -30 $OUT/bench_kernels.txt
echo "== $(( $(date +%s)-t0 )) s"
