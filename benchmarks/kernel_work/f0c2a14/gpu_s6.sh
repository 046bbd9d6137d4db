#!/bin/bash
# Final GPU call on the committed tree: GPU tests, where long lists finish (k = 2048 and 1536
# at few rows), the FlashInfer peer, bench_kernels, the serving proof (a tarball). At most 8
# files under $OUT.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu_topk.py tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
echo "== $(( $(date +%s)-t0 )) s"
skip=c1024,c2048,c8192,collect,coop
{ timeout 60 python3 tools/bench_topk_rows.py --json /tmp/r1.json --cols 65536 --k 2048 --rows 16,32,64,128 --skip $skip
  timeout 50 python3 tools/bench_topk_rows.py --json /tmp/r2.json --cols 131072 --k 2048 --rows 16,64,128 --skip $skip
  timeout 30 python3 tools/bench_topk_rows.py --json /tmp/r3.json --cols 32768 --k 1536 --rows 64 --skip $skip
} > $OUT/rows_long_lists.txt 2>&1; grep -v exact=True $OUT/rows_long_lists.txt | tail -3; grep -c exact=True $OUT/rows_long_lists.txt
echo "== $(( $(date +%s)-t0 )) s"
PYTHONPATH=.carry/fi timeout 90 python3 tools/bench_topk_peer.py --json $OUT/topk_peer.json --shapes 64x32768x512,8x32768x512,256x8192x512,64x131072x2048,1x16384x512,16x32768x512 > $OUT/topk_peer.txt 2>&1; tail -7 $OUT/topk_peer.txt
echo "== $(( $(date +%s)-t0 )) s"
timeout 120 python3 tools/bench_kernels.py --json $OUT/bench_kernels.json > $OUT/bench_kernels.txt 2>&1; tail -30 $OUT/bench_kernels.txt
echo "== $(( $(date +%s)-t0 )) s"
mkdir -p /tmp/sp; timeout 200 bash tools/h200_serving_proof.sh /tmp/sp 4 > /tmp/sp/serving.txt 2>&1
tail -5 /tmp/sp/serving.txt; tar czf $OUT/serving_proof.tgz -C /tmp/sp .
python3 - <<'PY'
import glob, json
for f in sorted(glob.glob("/tmp/sp/serve_*.json")):
    d = json.load(open(f)); print({k: v for k, v in d.items() if not isinstance(v, (list, dict))})
PY
echo "== $(( $(date +%s)-t0 )) s"
