#!/usr/bin/env bash
# The serving proof with one rank per GPU (tensor parallel): tools/serve_sim.py --devices N,
# all ranks started at once on one cache, strict mode error, over an empty, a warm and a
# prebuilt cache (.carry/cache312: built on a CPU box under Python 3.12, if carried).
# Each run must show 0 compiles and 0 cache-file reads after warmup on every rank, 0 wrong
# spot checks, and on the empty cache each spec compiled once in total.
# Usage: tools/multi_gpu_proof.sh OUTDIR [N]   (N: GPUs, default: all this host has)
set -u
out=${1:?outdir}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
n=${2:-$(python3 -c "import torch; print(torch.cuda.device_count())")}
base=$(mktemp -d /tmp/tp-XXXX)
nvidia-smi -L > "$out/gpus.txt" 2>&1
sim() { python3 tools/serve_sim.py --procs "$n" --devices "$n" --cache-dir "$base/$1" --label "$2" --json "$out/serve_$2.json"; }
sim empty "tp$n-empty"
sim empty "tp$n-warm"
if [ -d .carry/cache312 ]; then cp -r .carry/cache312 "$base/prebuilt"; sim prebuilt "tp$n-prebuilt-cpu"; fi
python3 -m qsa_warmup plan --json | python3 -c "import json,sys; print('planned', len(json.load(sys.stdin)['specs']))" | tee "$out/planned.txt"
