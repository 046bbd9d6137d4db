#!/bin/bash
# tree of e1da5fd+: bench_kernels at HEAD (dependent collect dispatched), the finish.dependent A/B,
# GPU tests (parallel when xdist is there), overflow A/B. CAP bounds the call.
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
git log --oneline -1 2>/dev/null | tee -a $OUT/gpu.txt
t0=$(date +%s); CAP=${CAP:-560}
el() { echo "== $(( $(date +%s)-t0 )) s"; }
left() { echo $(( CAP - ($(date +%s)-t0) )); }
timeout 170 python3 tools/bench_kernels.py --json $OUT/bench_kernels.json > $OUT/bench_kernels.txt 2>&1; tail -n 26 $OUT/bench_kernels.txt | cut -c1-300; el
timeout 60 python3 tools/bench_topk_rows.py --json $OUT/ab_finish_8k.json --cols 8192 --rows 256,1024,4096 --only finish.dependent,launch.after --rounds 3 > $OUT/ab_finish_8k.txt 2>&1; cat $OUT/ab_finish_8k.txt | cut -c1-200; el
timeout 60 python3 tools/bench_topk_rows.py --json $OUT/ab_finish_32k.json --cols 32768 --rows 256,1024,4096 --only finish.dependent --rounds 3 > $OUT/ab_finish_32k.txt 2>&1; cat $OUT/ab_finish_32k.txt | cut -c1-200; el
X=""; python3 -c "import xdist" 2>/dev/null && X="-n 4"
echo "xdist: $X"
[ $(left) -gt 80 ] && { timeout $(( $(left) - 60 )) python3 -m pytest -q $X -m gpu tests/test_gpu_topk.py tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; tail -n 4 $OUT/gpu_tests.txt; el; }
[ $(left) -gt 30 ] && { timeout $(left) python3 benchmarks/kernel_work/list_reserve/overflow_gpu.py > $OUT/overflow.txt 2>&1; tail -n 16 $OUT/overflow.txt | cut -c1-260; el; }
