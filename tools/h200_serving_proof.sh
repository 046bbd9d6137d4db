#!/usr/bin/env bash
# The serving proof on one GPU: tools/serve_sim.py (PROCS ranks, strict mode error) over an
# empty, a warm and a damaged cache (4 binaries of a copy of the warm one: 3 flipped, 1
# truncated), a cache prebuilt on a CPU box if one was carried (.carry/cache312), and a cache
# built by root then served by the unprivileged user nobody (read-only to it).
# Usage: tools/h200_serving_proof.sh OUTDIR [PROCS]
set -u
out=${1:?outdir}; procs=${2:-4}
mkdir -p "$out"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
base=$(mktemp -d /tmp/serve-XXXX); chmod 755 "$base"
sim() { python3 tools/serve_sim.py --procs "$procs" --cache-dir "$base/$1" --label "$2" --json "$out/serve_$2.json"; }
sim empty empty
sim empty warm
cp -r "$base/empty" "$base/damaged"
python3 - "$base/damaged" <<'PY'
import glob, os, sys
bins = sorted(glob.glob(os.path.join(sys.argv[1], "triton/*/*.cubin")))
for i, path in enumerate(bins[:4]):
    with open(path, "r+b") as f:
        if i == 3:
            f.truncate(64)
        else:
            f.seek(os.path.getsize(path) // 2); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 0x5A]))
print("damaged", len(bins[:4]), "of", len(bins), "binaries")
PY
sim damaged damaged
if [ -d .carry/cache312 ]; then cp -r .carry/cache312 "$base/prebuilt"; sim prebuilt prebuilt-cpu; fi
# a root-built cache, served by a user who cannot write it: the code and the cache readable by all
src=$(mktemp -d /tmp/qsa-src-XXXX); cp -r kernels qsa_warmup tools "$src/"; chmod -R a+rX "$src"
(umask 022; cp -r "$base/empty" "$base/rootbuilt")
if id nobody >/dev/null 2>&1 && command -v runuser >/dev/null; then
  runuser -u nobody -- env HOME=/tmp PYTHONPATH="$src" PYTHONUNBUFFERED=1 python3 "$src/tools/serve_sim.py" \
    --procs "$procs" --cache-dir "$base/rootbuilt" --label nonroot --json /tmp/serve_nonroot.json \
    && cp /tmp/serve_nonroot.json "$out/serve_nonroot.json"
else
  echo "no runuser/nobody here: non-root case not run"
fi
