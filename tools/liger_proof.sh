#!/usr/bin/env bash
# The Liger-Kernel proof of zero JIT (GPU). Parts:
#   record OUTDIR [pack]     plain Triton on an empty cache over the cover set, recorded
#                            (OUTDIR/liger.rec); with "pack", its Triton cache packed too
#                            (OUTDIR/triton_cache.tar.xz, for serve's TRITON_CACHE)
#   serve OUTDIR REC CACHE [TRITON_CACHE]
#                            plain Triton over the cover set on an empty cache (Triton's cold
#                            start; skipped when TRITON_CACHE, a packed cache from "record
#                            OUTDIR pack" or a folder of Triton's cache, brings it); a fresh random
#                            sweep, plain Triton (the reference) and warmed from CACHE (built
#                            offline from REC) under strict error, scope all; the cover set warmed
#                            from CACHE and from Triton's own warm cache, each in a fresh process;
#                            then tools/liger_proof.py compare
# liger-kernel must be importable (a wheel carried into PYTHONPATH).
set -u
part=${1:?part}; out=${2:?outdir}; shift 2
mkdir -p "$out"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
sweep="python3 tools/liger_proof.py sweep"
case $part in
  record)
    rm -rf /tmp/liger_tc
    TRITON_CACHE_DIR=/tmp/liger_tc python3 -m qsa_warmup record --out "$out/liger.rec" -- \
      $sweep --cases cover --no-digests --json "$out/record.json"
    if [ "${1:-}" = pack ]; then tar -C /tmp -cJf "$out/triton_cache.tar.xz" liger_tc; fi ;;
  serve)
    rec=${1:?recording}; cache=${2:?cache}; given=${3:-}
    rm -rf /tmp/liger_tc
    if [ -d "$given" ]; then cp -r "$given" /tmp/liger_tc
    elif [ -n "$given" ]; then tar -C /tmp -xJf "$given"
    else  # Triton's own cache, filled by plain Triton over the cover set: its cold start
      TRITON_CACHE_DIR=/tmp/liger_tc $sweep --cases cover --no-digests --json "$out/triton_cold.json"
    fi
    TRITON_CACHE_DIR=/tmp/liger_tc $sweep --cases random --seed 7 --json "$out/plain_random.json"
    TRITON_CACHE_DIR=$(mktemp -d) QSA_WARMUP_CACHE_DIR= $sweep --cases random --seed 7 \
      --warmup "$rec" --cache-dir "$cache" --json "$out/qsa_random.json"
    TRITON_CACHE_DIR=/tmp/liger_tc $sweep --cases cover --no-digests --json "$out/triton_warm.json"
    TRITON_CACHE_DIR=$(mktemp -d) $sweep --cases cover --no-digests --warmup "$rec" \
      --cache-dir "$cache" --json "$out/qsa_warm.json"
    python3 tools/liger_proof.py compare --dir "$out" | tee "$out/summary.txt" ;;
  *) echo "unknown part: $part (record, serve)" >&2; exit 2 ;;
esac
