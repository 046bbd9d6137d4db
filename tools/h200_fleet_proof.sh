#!/usr/bin/env bash
# The fleet proof on one GPU, with tools/serve_sim.py (strict mode error):
#  - bundle: a bundle exported on a CPU box (.carry/bundle312/fleet.qsa, Python 3.12) imported
#    into an empty folder, then served;
#  - tier: a redis-server on the loopback, filled by one host; new hosts (empty folders) served;
#  - fleet: K hosts (one folder each) started together against an empty tier, FLEET_RUNS
#    times: compiles in total must equal the plan's size in every run.
# Needs redis-server (unpacked from .carry/debs/*.deb when not installed) and the redis and
# zstandard packages (.whl/*.whl when not installed).
# Usage: [FLEET_RUNS=N] [REPEATS=N] tools/h200_fleet_proof.sh OUTDIR [K]
set -u
out=${1:?outdir}; k=${2:-8}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
if ! command -v redis-server >/dev/null; then
  mkdir -p /tmp/redis-root; for f in .carry/debs/*.deb; do dpkg -x "$f" /tmp/redis-root; done
  export PATH=/tmp/redis-root/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/redis-root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
redis-server --version | tee "$out/redis_version.txt"
base=$(mktemp -d /tmp/fleet-XXXX)
python3 -m qsa_warmup info --json > "$out/server_info.json"

# bundle from the CPU box
if [ -f .carry/bundle312/fleet.qsa ]; then
  python3 -m qsa_warmup import .carry/bundle312/fleet.qsa --cache-dir "$base/imported" --json > "$out/import.json"; echo "import exit $?"
  python3 -m qsa_warmup check --cache-dir "$base/imported" --json > "$out/check_imported.json"; echo "check exit $?"
  python3 tools/serve_sim.py --procs 4 --cache-dir "$base/imported" --label bundle-cpu312 --json "$out/serve_bundle.json"
fi

# a warm tier, then new hosts
port=6399
redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --dir "$base" >/dev/null
sleep 0.5
export QSA_WARMUP_REMOTE=redis://127.0.0.1:$port/0
python3 tools/serve_sim.py --procs 1 --cache-dir "$base/first" --label tier-first-host --json "$out/serve_tier_first.json"
python3 tools/serve_sim.py --procs 4 --cache-per-rank --cache-dir "$base/new" --label tier-new-hosts --json "$out/serve_tier_new.json"
python3 -m qsa_warmup info --cache-dir "$base/new/rank0" --remote "$QSA_WARMUP_REMOTE" --json > "$out/info_tier.json"

# K hosts against an empty tier, FLEET_RUNS times (fresh folders and an emptied tier each)
for run in $(seq 1 "${FLEET_RUNS:-1}"); do
  redis-cli -p $port flushall >/dev/null
  python3 tools/serve_sim.py --procs "$k" --cache-per-rank --cache-dir "$base/fleet$run" --label "fleet-$k-empty-tier-run$run" --json "$out/serve_fleet_run$run.json"
done
python3 -m qsa_warmup plan --json | python3 -c "import json,sys; print('planned', len(json.load(sys.stdin)['specs']))" | tee "$out/planned.txt"
redis-cli -p $port shutdown nosave >/dev/null 2>&1
unset QSA_WARMUP_REMOTE

[ "${REPEATS:-5}" -gt 0 ] && python3 tools/bench_fleet.py --out "$out/bench_fleet.json" --repeats "${REPEATS:-5}"
