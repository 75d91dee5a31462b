#!/usr/bin/env bash
# Single cells of the Gloo/MPI comparison, measured in pairs: for each cell
# (ranks, op, size) the three libraries run one after another, ROUNDS times,
# the order rotating each round, and each round's ratio counts. `rcoll-bench
# --compare` runs every size of rcoll, then of Gloo, then of MPI, so one
# library's rows of a size are a minute or more from another's; on a VM whose
# speed moves in episodes of that length (bench/RESULTS.md, stop 31: the same
# 2-rank 1 MiB allreduce at 220 or 730 us for minutes at a time, rcoll and
# MPI alike) a cell can then compare two different hosts. Here the rows of a
# round are seconds apart.
#
#   bench/paired_cells.sh [OUTDIR] CELL...     CELL = RANKSxOPxSIZE, e.g. 2xallgatherx1M
#
# Prints per cell the median time per op of each library over the rounds and
# the median (range) of the per-round ratios other/rcoll: above 1, rcoll is
# faster. Exit 3 when a run failed (named on stderr; its ratios leave that
# round out), 2 on a bad argument. Environment: ROUNDS (7), ITERS (20),
# WARMUP (5), TRANSPORT (tcp), TIME (median), RCOLL_BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
out=${1:?usage: bench/paired_cells.sh OUTDIR RANKSxOPxSIZE...}
shift
(($# > 0)) || { echo "paired_cells.sh: name at least one cell, e.g. 2xallgatherx1M" >&2; exit 2; }
rounds=${ROUNDS:-7} iters=${ITERS:-20} warmup=${WARMUP:-5} transport=${TRANSPORT:-tcp} timing=${TIME:-median}
failed=0
mpi=(mpirun)
((EUID == 0)) && mpi+=(--allow-run-as-root)
for cell in "$@"; do
  IFS=x read -r n op size <<<"$cell"
  [[ -n $n && -n $op && -n $size ]] || { echo "paired_cells.sh: bad cell '$cell' (want RANKSxOPxSIZE)" >&2; exit 2; }
  dir=$out/$cell
  mkdir -p "$dir"
  common=(--op "$op" --sizes "$size" --iters "$iters" --warmup "$warmup" --time "$timing")
  for round in $(seq 1 "$rounds"); do
    libs=(rcoll gloo mpi)
    shift_by=$(((round - 1) % 3))
    libs=("${libs[@]:shift_by}" "${libs[@]:0:shift_by}")
    for lib in "${libs[@]}"; do
      json=$dir/$lib-$round.json
      echo "$cell round $round/$rounds: $lib" >&2
      case $lib in
        rcoll) "$build/tools/rcoll-run" -n "$n" -- "$build/bench/rcoll-bench" "${common[@]}" --transport "$transport" --json "$json" ;;
        gloo) "$build/tools/rcoll-run" -n "$n" -- "$build/bench/rcoll-gloo-bench" "${common[@]}" --json "$json" ;;
        mpi) "${mpi[@]}" --oversubscribe -np "$n" --mca btl tcp,self "$build/bench/rcoll-mpi-bench" "${common[@]}" --json "$json" ;;
      esac >"$dir/$lib-$round.log" 2>&1 || {
        echo "paired_cells.sh: $cell round $round: $lib failed (see $dir/$lib-$round.log)" >&2
        rm -f "$json"  # a partial file must not count
        failed=1
      }
    done
  done
done
bench/paired_cells.py "$out" "$rounds" "$@"
((failed == 0)) || exit 3
