#!/usr/bin/env bash
# Broadcast algorithms: the star against the chain (RCOLL_BROADCAST_ALGO),
# alternating ROUNDS times in one invocation. Prints median busbw per size and
# the star/chain ratio; the spread across rounds is in OUTDIR/*.json. Run it
# on a host of at most 2 CPUs to measure what the automatic choice picks there
# (taskset -c 0,1 bench/broadcast_algo.sh on a larger one).
#   bench/broadcast_algo.sh [OUTDIR]   (RANKS, SIZES, ITERS, ROUNDS, TRANSPORT override)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
out=${1:-bench-results/broadcast_algo}
ranks=${RANKS:-4} sizes=${SIZES:-512K,1M,2M,4M,16M,64M} iters=${ITERS:-20} rounds=${ROUNDS:-5}
transport=${TRANSPORT:-tcp}
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for algo in star chain; do
    echo "round $round: $algo ($ranks ranks, $transport)" >&2
    RCOLL_BROADCAST_ALGO=$algo "$build/tools/rcoll-run" -n "$ranks" -- "$build/bench/rcoll-bench" \
      --op broadcast --transport "$transport" --sizes "$sizes" --iters "$iters" --warmup 3 \
      --json "$out/$algo-$round.json" > "$out/$algo-$round.log" 2>&1
  done
done
echo "== broadcast ($ranks ranks, $transport)"
bench/ab_medians.py "$out" "$rounds" star chain
