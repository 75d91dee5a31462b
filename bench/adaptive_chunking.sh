#!/usr/bin/env bash
# Adaptive chunking against the fixed loopback tuning (128 KiB frames x 4 in
# flight, pinned with --chunk/--window), on a long link: every frame arrives
# LATENCY_US late (RCOLL_INJECT link-latency; this kernel has no netem), and on
# plain loopback (LATENCY_US=0), where both must be the same. The two run
# alternately ROUNDS times in one invocation; prints median busbw per size and
# the adaptive/fixed ratio, and the tuning the adaptive runs chose.
#   bench/adaptive_chunking.sh [OUTDIR]   (RANKS, SIZES, ITERS, ROUNDS, LATENCY_US, TRANSPORT override)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
out=${1:-bench-results/adaptive}
ranks=${RANKS:-2} sizes=${SIZES:-256K,1M,4M,16M,64M} iters=${ITERS:-5} rounds=${ROUNDS:-3}
latency=${LATENCY_US:-2000} transport=${TRANSPORT:-tcp}
inject=()
[[ $latency != 0 ]] && inject=(--inject "link-latency:us=$latency")
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for mode in adaptive fixed; do
    pin=()
    [[ $mode == fixed ]] && pin=(--chunk 131072 --window 4)
    echo "round $round: $mode (link latency ${latency} us, $transport, $ranks ranks)" >&2
    RCOLL_DEBUG=info "$build/tools/rcoll-run" -n "$ranks" "${inject[@]}" -- "$build/bench/rcoll-bench" --op allreduce \
      --transport "$transport" --sizes "$sizes" --iters "$iters" --warmup 2 "${pin[@]}" \
      --json "$out/$mode-$round.json" > "$out/$mode-$round.log" 2>&1
  done
done
grep -h -o "slowest link: .*in flight" "$out"/adaptive-*.log | sort | uniq -c | sed 's/^/chosen: /'
bench/ab_medians.py "$out" "$rounds" adaptive fixed
