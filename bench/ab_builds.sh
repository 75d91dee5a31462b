#!/usr/bin/env bash
# Two builds of rcoll side by side (a change's before and after): rcoll-bench
# allreduce from each, alternating ROUNDS times (the order flipping every
# round) so both see the same machine; prints the median busbw per size of
# each and the after/before busbw ratio (above 1: after is faster;
# bench/ab_medians.py).
#   bench/ab_builds.sh BEFORE_BUILD AFTER_BUILD [OUTDIR]    (RANKS, SIZES, ITERS, ROUNDS override)
# e.g. git worktree add /tmp/before 50b65c5 && cmake -S /tmp/before -B /tmp/before/build -G Ninja
#      -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build /tmp/before/build --target rcoll-bench rcoll-run
#      RANKS=4 SIZES=4K ITERS=300 ROUNDS=9 bench/ab_builds.sh /tmp/before/build build
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/ab_builds.sh BEFORE_BUILD AFTER_BUILD [OUTDIR]} after=${2:?usage: bench/ab_builds.sh BEFORE_BUILD AFTER_BUILD [OUTDIR]}
out=${3:-bench-results/ab}
ranks=${RANKS:-4} sizes=${SIZES:-4K,64M} iters=${ITERS:-30} rounds=${ROUNDS:-9}
for b in "$before" "$after"; do
  [[ -x $b/bench/rcoll-bench && -x $b/tools/rcoll-run ]] || { echo "ab_builds.sh: $b has no bench/rcoll-bench and tools/rcoll-run" >&2; exit 2; }
done
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  order=(before after)
  ((round % 2 == 0)) && order=(after before)
  for mode in "${order[@]}"; do
    build=$before
    [[ $mode == after ]] && build=$after
    "$build/tools/rcoll-run" -n "$ranks" -- "$build/bench/rcoll-bench" --op allreduce --sizes "$sizes" \
      --iters "$iters" --warmup 5 --json "$out/$mode-$round.json" > "$out/$mode-$round.log"
  done
done
bench/ab_medians.py "$out" "$rounds" after before
