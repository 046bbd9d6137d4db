#!/bin/bash
# Next GPU call: the profile that shows what limits the missed top-k targets (ncu's hardware
# counters on the dispatched launches; Firecracker hosts only). About 2-4 minutes.
cd "$(dirname "$0")/.."

export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
python3 scratch/ncu_topk.py > /dev/null 2>&1  # fill Triton's cache so ncu profiles no compile
timeout 400 ncu --clock-control none --target-processes all \
  --kernel-name regex:"_split_|_coop_|_ragged_topk" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats \
  --csv --page details python3 scratch/ncu_topk.py > $OUT/ncu_topk.csv 2> $OUT/ncu_topk.err
tail -3 $OUT/ncu_topk.err; wc -l $OUT/ncu_topk.csv
