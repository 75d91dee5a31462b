#!/usr/bin/env bash
# User-space instructions one rank executes per op, counted by callgrind: a
# figure that a noisy host does not move (loop times on the 2-vCPU development
# VM varied 10x between rounds at 12-28% steal time). One rank runs under
# valgrind, the others natively; it runs ITERS_LOW and ITERS_HIGH ops and the
# difference over the extra ops is the per-op count (setup and teardown cancel
# out). The slowed rank rarely waits on its peers, so the count is its own work
# (polling while it does wait is counted too: compare like with like).
#   bench/instructions_per_op.sh OP SIZE RANK RANKS [BENCH]
#   e.g. bench/instructions_per_op.sh broadcast 4K 1 2
# BENCH defaults to the build's rcoll-bench (another binary: an older build to
# compare with). TRANSPORT (tcp), ITERS_LOW (2000), ITERS_HIGH (6000) override.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 4 ]]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
op=$1 size=$2 rank=$3 ranks=$4
build=${RCOLL_BUILD_DIR:-build}
bench=${5:-$build/bench/rcoll-bench}
low=${ITERS_LOW:-2000} high=${ITERS_HIGH:-6000}
if ! command -v valgrind >/dev/null; then
  echo "instructions_per_op.sh: needs valgrind (apt-get install valgrind)" >&2
  exit 2
fi
if [[ ! -x $bench || ! -x $build/tools/rcoll-run ]]; then
  echo "instructions_per_op.sh: no $bench or $build/tools/rcoll-run; build them first" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A total
for n in $low $high; do
  # Generous deadlines: the rank under valgrind runs 50x slower than its peers.
  RCOLL_OP_TIMEOUT_MS=600000 RCOLL_LIVENESS_MS=60000 RCOLL_STRAGGLER_TIMEOUT_MS=600000 \
    RCOLL_TRANSPORT=${TRANSPORT:-tcp} "$build/tools/rcoll-run" -n "$ranks" -- sh -c \
    "if [ \"\$RCOLL_RANK\" = $rank ]; then exec valgrind --tool=callgrind --callgrind-out-file=$tmp/cg.$n $bench \"\$@\"; else exec $bench \"\$@\"; fi" \
    rcoll-bench --op "$op" --sizes "$size" --iters "$n" --warmup 10 --time mean > "$tmp/run.$n.log" 2>&1 || {
      echo "instructions_per_op.sh: the run of $n ops failed:" >&2
      tail -20 "$tmp/run.$n.log" >&2
      exit 1
    }
  total[$n]=$(awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.$n")
done
echo "$op $size, rank $rank of $ranks, $(basename "$bench"): $(( (total[$high] - total[$low]) / (high - low) )) instructions per op"
