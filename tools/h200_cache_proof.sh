#!/usr/bin/env bash
# The H200 proof of issue 3: a cache built on the CPU box (Python 3.12, sm_90) is carried here,
# moved, mounted read-only, and hit by plain Triton with 0 compiles over the envelope sweep;
# a cache built under Python 3.11 is reported stale. Usage: tools/h200_cache_proof.sh OUTDIR
set -u
out=${1:?outdir}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
W="python3 -m qsa_warmup"
moved=/tmp/moved/qsa-cache; ro_src=/tmp/ro-src/qsa-cache; ro=/mnt/qsa-ro
mkdir -p /tmp/moved /tmp/ro-src "$ro"
# the build location must not exist here, or Triton's absolute group paths would still resolve
src=/tmp/carried-cache312; mv .carry/cache312 "$src"
cp -r "$src" "$moved"; cp -r "$src" "$ro_src"; cp -r "$src" /tmp/control
mount --bind "$ro_src" "$ro" && mount -o remount,ro,bind "$ro" && echo "read-only mount ok"
touch "$ro/probe" 2>/dev/null && echo "ERROR: $ro is writable" || echo "confirmed: $ro refuses writes"

echo "== check, moved copy"; $W check --cache-dir "$moved" --json > "$out/check_moved.json"; echo "rc=$?"
echo "== info, moved copy"; $W info --cache-dir "$moved" --json > "$out/info_moved.json"; echo "rc=$?"
tdir=$(python3 -c "import json;print(json.load(open('$out/info_moved.json'))['triton_cache_dir'])")
echo "== plain Triton sweep, TRITON_CACHE_DIR=$tdir"
env -u QSA_WARMUP_CACHE_DIR TRITON_CACHE_DIR="$tdir" python3 tools/_sweep_gpu.py default 1 | tee "$out/sweep_moved.json"

echo "== check, read-only mount"; $W check --cache-dir "$ro" --trace --json > "$out/check_ro.json"; echo "rc=$?"
echo "== info, read-only mount"; $W info --cache-dir "$ro" --json > "$out/info_ro.json"; echo "rc=$?"
tdir=$(python3 -c "import json;print(json.load(open('$out/info_ro.json'))['triton_cache_dir'])")
echo "== plain Triton sweep, read-only, TRITON_CACHE_DIR=$tdir"
TRITON_CACHE_DIR="$tdir" python3 tools/_sweep_gpu.py default 2 | tee "$out/sweep_ro.json"

echo "== control: the same copy, group files not re-pointed, as Triton alone sees a moved cache"
TRITON_CACHE_DIR=/tmp/control/triton python3 tools/_sweep_gpu.py default 3 | tee "$out/sweep_control.json"

echo "== stale: tiny cache built under Python 3.11"
$W check --preset tiny --cache-dir .carry/cache311-tiny; echo "rc=$?"
$W check --preset tiny --cache-dir .carry/cache311-tiny --json > "$out/check_stale.json"
umount "$ro"; mv "$src" .carry/cache312
