#!/usr/bin/env bash
# CPU box A/B: tools/bench_host.py (3000 calls a case, best of 3) on two trees, one process
# each, alternating. Usage: benchmarks/bench_host/call_args/ab_call_args.sh BEFORE_TREE AFTER_TREE [ROUNDS]
set -eu
before=${1:?}; after=${2:?}; rounds=${3:-4}
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    tree=$before; [ "$side" = after ] && tree=$after
    (cd "$tree" && python3 tools/bench_host.py --calls 3000 --json /dev/null 2>/dev/null) \
      | grep -E "^(decode select|ragged_topk)" | sed "s/^/round $r $side: /"
  done
done
