#!/usr/bin/env bash
# TCP congestion control on loopback: rcoll's choice there (RCOLL_TCP_CONGESTION=auto:
# reno) against the kernel's default (BBR on the development host), alternating
# ROUNDS times in one invocation, per op. Prints median busbw per size and the
# auto/default ratio.
#   bench/tcp_congestion.sh [OUTDIR]   (RANKS, SIZES, ITERS, ROUNDS, OPS override)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
out=${1:-bench-results/tcp-congestion}
ranks=${RANKS:-2} sizes=${SIZES:-64K,1M,4M,16M,64M} iters=${ITERS:-20} rounds=${ROUNDS:-5}
ops=${OPS:-allreduce allgather broadcast}
echo "kernel default: $(cat /proc/sys/net/ipv4/tcp_congestion_control)," \
     "allowed: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)" >&2
for op in $ops; do
  mkdir -p "$out/$op"
  for round in $(seq 1 "$rounds"); do
    for mode in auto default; do
      echo "$op round $round: RCOLL_TCP_CONGESTION=$mode ($ranks ranks)" >&2
      RCOLL_TCP_CONGESTION=$mode RCOLL_DEBUG=info "$build/tools/rcoll-run" -n "$ranks" -- "$build/bench/rcoll-bench" \
        --op "$op" --transport tcp --sizes "$sizes" --iters "$iters" --warmup 3 \
        --json "$out/$op/$mode-$round.json" > "$out/$op/$mode-$round.log" 2>&1
    done
  done
  grep -h -o "congestion control [a-z ]*" "$out/$op"/auto-1.log | sort -u | sed "s/^/$op auto: /" || true
  echo "== $op"
  bench/ab_medians.py "$out/$op" "$rounds" auto default
done
