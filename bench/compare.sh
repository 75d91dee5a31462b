#!/usr/bin/env bash
# Compares rcoll with Gloo and MPI on this host: allreduce, float32, sum, at 2
# and 4 ranks, over 4 KiB .. 64 MiB, every library on TCP over loopback. A thin
# wrapper over `rcoll-bench --compare`, which runs the baselines itself.
#
#   bench/compare.sh [OUTDIR]          (default ./bench-results)
#
# Per rank count N: OUTDIR/npN.log (rcoll-bench's output), OUTDIR/npN.json
# (every library's rows, each with its "library"), OUTDIR/npN/{gloo,mpi}.{log,json}
# (the baselines' own output and rows), OUTDIR/npN.png when gnuplot is
# installed; then the comparison table (busbw of each library, rcoll/gloo and
# rcoll/mpi, time of each) on stdout. A baseline that was not built (no
# libgloo-dev / no MPI) is left out.
#
# Environment: RCOLL_BUILD_DIR (where the binaries are; default: build-bench,
# then build, under the repository root), RANKS ("2 4"), SIZES (4K:64M),
# ITERS (20), WARMUP (5), TIME (rcoll-bench --time: median, mean or sync; median).
set -euo pipefail

out=${1:-./bench-results}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ranks=${RANKS:-"2 4"}
sizes=${SIZES:-4K:64M}
iters=${ITERS:-20}
warmup=${WARMUP:-5}

me=compare.sh
# shellcheck source=bench/bench_common.sh
source "$root/bench/bench_common.sh"

libs=()
[[ -x $build/bench/rcoll-gloo-bench ]] && libs+=(gloo)
[[ -x $build/bench/rcoll-mpi-bench ]] && command -v mpirun >/dev/null && libs+=(mpi)
if ((${#libs[@]} == 0)); then
  echo "$me: neither rcoll-gloo-bench nor rcoll-mpi-bench (with mpirun) is there to compare with" >&2
  exit 2
fi
compare=$(IFS=,; echo "${libs[*]}")

rc=0
for n in $ranks; do
  plot=()
  command -v gnuplot >/dev/null && plot=(--plot "$out/np$n.png")
  echo "$me: $n ranks: rcoll, then $compare ..." >&2
  status=0
  "$run" -n "$n" -- "$build/bench/rcoll-bench" "${common[@]}" --compare "$compare" --compare-dir "$out/np$n" \
    --json "$out/np$n.json" "${plot[@]}" >"$out/np$n.log" 2>&1 || status=$?
  echo
  echo "allreduce float32 sum, $n ranks"
  # The table, as rank 0 printed it (rcoll-run prefixes its lines with "[0] ").
  sed -n '/# comparison:/,/^\[0\] #$/p' "$out/np$n.log" | sed 's/^\[0\] //'
  if ((status != 0)); then
    echo "$me: $n ranks: rcoll-bench exited with code $status (see $out/np$n.log)" >&2
    rc=1
  fi
done
echo
echo "JSON, logs and plots in $out"
exit $rc
