#!/bin/bash
# Next GPU call (prepared 2026-12-07): the collect launch with a chunk counted whole then
# reloaded in tiles (48 registers at 2 warps against 165; CPU-exact) timed beside the tree, then
# Nsight Compute's counters on the dispatched top-k launches. About 4-6 minutes.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
AB_SHAPES=4096x32768x512,1024x32768x512,256x32768x512,4096x8192x512,1024x8192x512,256x8192x512,2048x4160x512,64x32768x512,64x131072x2048,8x32768x512 \
  timeout 150 python3 scratch/ab_variants.py reload256 reload512 > $OUT/ab_reload.txt 2>&1; tail -22 $OUT/ab_reload.txt
echo "== $(( $(date +%s)-t0 )) s"
bash scratch/gpu_profile.sh
echo "== $(( $(date +%s)-t0 )) s"
