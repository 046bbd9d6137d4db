#!/bin/bash
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -c "import torch,triton,sys;print(sys.version.split()[0],torch.__version__,triton.__version__)"
export PYTHONDONTWRITEBYTECODE=1
t0=$(date +%s)
timeout 160 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_topk.py -k coop 2>&1 | tail -12 | tee $OUT/t_gpu_topk_coop.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 60 python3 scratch/coop_streams.py 2>&1 | tail -8 | tee $OUT/coop_streams.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -12 | tee $OUT/t_gpu.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 150 python3 benchmarks/kernel_work/coop/ab_run.py 2>&1 | tail -40 | tee $OUT/ab.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 100 python3 scratch/coop_64.py 2>&1 | tail -8 | tee $OUT/coop_64.txt
echo "== $(( $(date +%s)-t0 )) s"
