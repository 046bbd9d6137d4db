#!/bin/bash
# the collect launch's late load A/B, GPU tests, FlashInfer peer, serving proof; carry [".carry/cache312", ".carry/fi"]
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); CAP=${CAP:-560}
el() { echo "== $(( $(date +%s)-t0 )) s"; }
left() { echo $(( CAP - ($(date +%s)-t0) )); }
ab() { timeout 70 python3 tools/bench_topk_rows.py --json $OUT/ab_$1.json --only collect.late,launch.after --rounds 3 "${@:2}" > $OUT/ab_$1.txt 2>&1; grep -c exact=True $OUT/ab_$1.txt; grep -v "exact=True" $OUT/ab_$1.txt | tail -3; }
ab 32k --cols 32768 --rows 64,256,1024,4096; el
ab 8k --cols 8192 --rows 256,1024,4096; el
ab 128k --cols 131072 --k 2048 --rows 64,256; el
timeout 120 python3 -m pytest -q -n 4 -m gpu tests/test_gpu_topk.py tests/test_gpu.py -p no:cacheprovider > $OUT/gpu_tests.txt 2>&1; tail -n 2 $OUT/gpu_tests.txt; el
[ -d .carry/fi ] && { PYTHONPATH=.carry/fi timeout 100 python3 tools/bench_topk_peer.py --json $OUT/topk_peer.json --shapes 64x32768x512,8x32768x512,256x8192x512,64x131072x2048,1x16384x512,16x32768x512,1024x8192x512,8x8192x512 > $OUT/topk_peer.txt 2>&1; tail -n 10 $OUT/topk_peer.txt; el; }
[ $(left) -gt 100 ] && { CAP=$(left) timeout $(left) bash tools/h200_serving_proof.sh /tmp/sp 4 > $OUT/serving_proof.txt 2>&1; tail -n 12 $OUT/serving_proof.txt | cut -c1-300; tar -C /tmp -czf $OUT/serving_proof.tgz sp; el; }
