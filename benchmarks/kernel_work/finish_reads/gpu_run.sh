#!/bin/bash
# one call for all: finish A/B, coop designs for narrow rows, GPU tests, peer, bench_kernels, serving proof.
# carry [".carry/cache312", ".carry/fi"]. ONE tar back.
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $R/gpu.txt
t0=$(date +%s); CAP=${CAP:-580}
el() { echo "== $(( $(date +%s)-t0 )) s"; }
left() { echo $(( CAP - ($(date +%s)-t0) )); }
pack() { tar -C /tmp -czf $OUT/results.tgz r; }
OUT=$R timeout 100 python3 scratch/ab_finish.py 2 > $R/ab_finish.txt 2>&1; grep -v Warn $R/ab_finish.txt | cut -c1-200; el; pack
rows() { timeout 60 python3 tools/bench_topk_rows.py --json $R/rows_$1.json --only coop --rounds 2 "${@:2}" > $R/rows_$1.txt 2>&1; grep -v Warn $R/rows_$1.txt | cut -c1-150; }
rows 8k --cols 8192 --rows 1,8,16,32,64; el; pack
timeout 100 python3 -m pytest -q -n 4 -m gpu tests/test_gpu_topk.py tests/test_gpu.py -p no:cacheprovider > $R/gpu_tests.txt 2>&1; tail -n 3 $R/gpu_tests.txt; el; pack
rows 2k --cols 2048 --rows 1,8,64; el; pack
[ -d .carry/fi ] && { PYTHONPATH=.carry/fi timeout 80 python3 tools/bench_topk_peer.py --json $R/topk_peer.json --shapes 64x32768x512,8x32768x512,256x8192x512,64x131072x2048,1x16384x512,16x32768x512,1024x8192x512,8x8192x512,1x8192x512,16x8192x512,1x2048x512,64x8192x512 > $R/topk_peer.txt 2>&1; tail -n 13 $R/topk_peer.txt; el; pack; }
rows 4k --cols 4096 --rows 1,8,32; el; pack
timeout 170 python3 tools/bench_kernels.py --json $R/bench_kernels.json > $R/bench_kernels.txt 2>&1; tail -n 24 $R/bench_kernels.txt | cut -c1-300; el; pack
[ $(left) -gt 60 ] && { timeout $(( $(left) - 3 )) bash tools/h200_serving_proof.sh $R/sp 4 > $R/serving_proof.txt 2>&1; grep -E "^[a-z-]+: 4 ranks" $R/serving_proof.txt | cut -c1-250; el; pack; }
