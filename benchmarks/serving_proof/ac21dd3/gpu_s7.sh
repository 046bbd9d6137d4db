#!/bin/bash
# GPU call on the tree with the prefill key tiles: GPU tests, bench_kernels, the serving proof.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_topk.py tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 120 python3 tools/bench_kernels.py --json $OUT/bench_kernels.json > $OUT/bench_kernels.txt 2>&1; tail -30 $OUT/bench_kernels.txt
echo "== $(( $(date +%s)-t0 )) s"
mkdir -p /tmp/sp; timeout 200 bash tools/h200_serving_proof.sh /tmp/sp 4 > /tmp/sp/serving.txt 2>&1
grep -E "^[a-z-]+: 4 ranks" /tmp/sp/serving.txt; tar czf $OUT/serving_proof.tgz -C /tmp/sp .
echo "== $(( $(date +%s)-t0 )) s"
