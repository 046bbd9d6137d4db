#!/bin/bash
# The owed GPU work for a budget of a few minutes, most needed first (a cut run returns $OUT).
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 25 python3 scratch/coop_streams.py 2>&1 | tail -1 | tee $OUT/coop_streams.txt
base=$(mktemp -d /tmp/serve-XXXX)
cp -r .carry/cache312 $base/prebuilt
timeout 60 python3 tools/serve_sim.py --procs 4 --cache-dir $base/prebuilt --label prebuilt-cpu \
  --json $OUT/serve_prebuilt-cpu.json > $OUT/serve_prebuilt-cpu.log 2>&1; tail -1 $OUT/serve_prebuilt-cpu.log | cut -c1-400
echo "== $(( $(date +%s)-t0 )) s"
AB_SHAPES=8x32768x512,64x32768x512,1x16384x512,256x8192x512,64x131072x2048,4096x32768x512 \
  timeout 90 python3 scratch/ab_variants.py bound5s6 bound5s7 > $OUT/ab_variants.txt 2>&1; tail -14 $OUT/ab_variants.txt
echo "== $(( $(date +%s)-t0 )) s"
PYTHONPATH=.carry/fi timeout 50 python3 tools/bench_topk_peer.py --json $OUT/topk_peer.json \
  --shapes 64x32768x512,8x32768x512,256x8192x512,64x131072x2048,1x16384x512,16x32768x512 2>&1 | tail -9 | tee $OUT/peer.txt
echo "== $(( $(date +%s)-t0 )) s"
