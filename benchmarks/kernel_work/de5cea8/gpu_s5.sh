#!/bin/bash
# Second GPU call: the coop launch's append as rows of 16 (coop_rows: the loaded chunk
# reshaped; coop_reload: reloaded as rows), the tuning designs of topk_tuning_configs with the
# rows-of-16 collect, then Nsight Compute on the dispatched launches.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
AB_SHAPES=1x16384x512,8x16384x512,32x16384x512,1x32768x512,8x32768x512,16x32768x512,8x65536x2048 \
  timeout 100 python3 scratch/ab_variants.py coop_rows coop_reload > $OUT/ab_coop_rows.txt 2>&1; tail -14 $OUT/ab_coop_rows.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 130 python3 tools/bench_topk_rows.py --json $OUT/rows_32k.json --rows 64,256,1024,4096 --skip c1024 > $OUT/rows_32k.txt 2>&1; grep -c exact=True $OUT/rows_32k.txt; grep -v exact=True $OUT/rows_32k.txt | tail -3
echo "== $(( $(date +%s)-t0 )) s"
timeout 70 python3 tools/bench_topk_rows.py --json $OUT/rows_8k.json --cols 8192 --rows 256,2048 --skip c1024 > $OUT/rows_8k.txt 2>&1; grep -c exact=True $OUT/rows_8k.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 50 python3 tools/bench_topk_rows.py --json $OUT/rows_128k.json --cols 131072 --k 2048 --rows 64 --skip c1024 > $OUT/rows_128k.txt 2>&1; grep -c exact=True $OUT/rows_128k.txt
echo "== $(( $(date +%s)-t0 )) s"
python3 scratch/ncu_topk.py > /dev/null 2>&1
timeout 200 ncu --clock-control none --target-processes all \
  --kernel-name regex:"_split_|_coop_|_ragged_topk" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats \
  --csv --page details python3 scratch/ncu_topk.py > $OUT/ncu_topk.csv 2> $OUT/ncu_topk.err
tail -3 $OUT/ncu_topk.err; wc -l $OUT/ncu_topk.csv
echo "== $(( $(date +%s)-t0 )) s"
