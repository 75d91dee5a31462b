#!/usr/bin/env bash
# CPU binding of the ranks: rcoll-run --bind-to core against --bind-to none,
# alternating ROUNDS times in one invocation, per op. Prints median busbw per
# size and the core/none ratio; the spread across rounds is in OUTDIR/*.json.
#   bench/binding.sh [OUTDIR]   (RANKS, SIZES, ITERS, ROUNDS, OPS, TRANSPORT override)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
out=${1:-bench-results/binding}
ranks=${RANKS:-2} sizes=${SIZES:-4K,64K,256K,1M,4M,16M} iters=${ITERS:-30} rounds=${ROUNDS:-5}
ops=${OPS:-allreduce allgather} transport=${TRANSPORT:-tcp}
for op in $ops; do
  mkdir -p "$out/$op"
  for round in $(seq 1 "$rounds"); do
    for mode in core none; do
      echo "$op round $round: --bind-to $mode ($ranks ranks, $transport)" >&2
      "$build/tools/rcoll-run" -n "$ranks" --bind-to "$mode" -- "$build/bench/rcoll-bench" \
        --op "$op" --transport "$transport" --sizes "$sizes" --iters "$iters" --warmup 3 \
        --json "$out/$op/$mode-$round.json" > "$out/$op/$mode-$round.log" 2>&1
    done
  done
  echo "== $op ($ranks ranks, $transport)"
  bench/ab_medians.py "$out/$op" "$rounds" core none
done
