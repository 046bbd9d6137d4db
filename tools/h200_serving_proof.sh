#!/usr/bin/env bash
# The H200 proof of issue 4: serve_sim over an empty, warm, CPU-prebuilt (Python 3.12) and a
# damaged cache, with strict mode error. Usage: tools/h200_serving_proof.sh OUTDIR [PROCS]
set -u
out=${1:?outdir}; procs=${2:-4}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
rm -rf /tmp/serve-empty /tmp/serve-prebuilt /tmp/serve-damaged
python3 tools/serve_sim.py --procs "$procs" --cache-dir /tmp/serve-empty --label empty --json "$out/serve_empty.json"
python3 tools/serve_sim.py --procs "$procs" --cache-dir /tmp/serve-empty --label warm --json "$out/serve_warm.json"
cp -r .carry/cache312 /tmp/serve-prebuilt
python3 tools/serve_sim.py --procs "$procs" --cache-dir /tmp/serve-prebuilt --label prebuilt-cpu-py312 --json "$out/serve_prebuilt.json"
cp -r .carry/cache312 /tmp/serve-damaged
python3 - <<'PY'
import glob, os
bins = sorted(glob.glob("/tmp/serve-damaged/triton/*/*.cubin"))
for i, path in enumerate(bins[:4]):          # flip a byte in three binaries, truncate a fourth
    with open(path, "r+b") as f:
        if i == 3:
            f.truncate(64)
        else:
            f.seek(os.path.getsize(path) // 2); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 0x5A]))
print("damaged", len(bins[:4]), "of", len(bins), "binaries")
PY
python3 tools/serve_sim.py --procs "$procs" --cache-dir /tmp/serve-damaged --label damaged --json "$out/serve_damaged.json"
