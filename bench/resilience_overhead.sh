#!/usr/bin/env bash
# Fault-free cost of resilience: rcoll-bench allreduce with recovery on
# (backups, ledger, liveness polling) and off (RCOLL_RECOVERY=0), alternating
# ROUNDS times in one invocation so both see the same machine; prints the
# median busbw per size and the on/off ratio.
#   bench/resilience_overhead.sh [OUTDIR]    (RANKS, SIZES, ITERS, ROUNDS, INPLACE override)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
out=${1:-bench-results/resilience}
ranks=${RANKS:-4} sizes=${SIZES:-1M:256M} iters=${ITERS:-5} rounds=${ROUNDS:-3}
inplace=${INPLACE:+--inplace}
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for mode in on off; do
    flag=1; [[ $mode == off ]] && flag=0
    echo "round $round: recovery $mode" >&2
    RCOLL_RECOVERY=$flag "$build/tools/rcoll-run" -n "$ranks" -- "$build/bench/rcoll-bench" --op allreduce \
      --sizes "$sizes" --iters "$iters" --warmup 2 $inplace --json "$out/$mode-$round.json" > "$out/$mode-$round.log"
  done
done
bench/ab_medians.py "$out" "$rounds" on off
