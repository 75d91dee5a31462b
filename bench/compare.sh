#!/usr/bin/env bash
# Compares rcoll with Gloo and MPI on this host: allreduce, float32, sum, at 2
# and 4 ranks, over 4 KiB .. 64 MiB, every library on TCP over loopback.
#
#   bench/compare.sh [OUTDIR]          (default ./bench-results)
#
# Writes OUTDIR/{rcoll,gloo,mpi}-np{2,4}.json (rcoll-bench's JSON format) and
# each run's table in the matching .log, then prints one table per rank count:
# busbw of each library, the ratios rcoll/gloo and rcoll/mpi, and the 4 KiB
# latency of each. A baseline that was not built (no libgloo-dev / no MPI) shows
# as "n/a".
#
# Environment: RCOLL_BUILD_DIR (where the binaries are; default: build-bench,
# then build, under the repository root), RANKS ("2 4"), SIZES (4K:64M),
# ITERS (20), WARMUP (5).
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

for n in $ranks; do
  measure "rcoll-np$n" "$run" -n "$n" -- "$build/bench/rcoll-bench"
  if [[ -x $build/bench/rcoll-gloo-bench ]]; then
    measure "gloo-np$n" "$run" -n "$n" -- "$build/bench/rcoll-gloo-bench"
  fi
  if [[ -x $build/bench/rcoll-mpi-bench ]] && command -v mpirun >/dev/null; then
    # Open MPI; the tcp BTL so that MPI, like rcoll and Gloo, goes through TCP sockets.
    measure "mpi-np$n" mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl tcp,self \
      "$build/bench/rcoll-mpi-bench"
  fi
done

python3 - "$out" $ranks <<'EOF'
import json, os, sys
out, ranks = sys.argv[1], sys.argv[2:]
def load(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return {r["size"]: r for r in json.load(f)["rows"] if r["op"] == "allreduce"}
    except (OSError, ValueError, KeyError):
        return {}
cell = lambda v, fmt: "n/a" if v is None else fmt % v
for n in ranks:
    libs = {lib: load(f"{lib}-np{n}") for lib in ("rcoll", "gloo", "mpi")}
    bw = lambda lib, s: libs[lib][s]["busbw"] if s in libs[lib] else None
    ratio = lambda a, b: a / b if a is not None and b else None
    print(f"\nallreduce float32 sum, {n} ranks, busbw in GB/s")
    print("%12s %10s %10s %10s %11s %10s" % ("size (B)", "rcoll", "gloo", "mpi", "rcoll/gloo", "rcoll/mpi"))
    for s in sorted(set().union(*libs.values())):
        r, g, m = bw("rcoll", s), bw("gloo", s), bw("mpi", s)
        print("%12d %10s %10s %10s %11s %10s" % (s, cell(r, "%.3f"), cell(g, "%.3f"), cell(m, "%.3f"),
                                                 cell(ratio(r, g), "%.2f"), cell(ratio(r, m), "%.2f")))
    lat = {lib: (libs[lib][4096]["time_us"] if 4096 in libs[lib] else None) for lib in libs}
    algo = libs["gloo"].get(4096, {}).get("algo")
    print("4 KiB latency (us): rcoll %s  gloo %s%s  mpi %s" % (
        cell(lat["rcoll"], "%.1f"), cell(lat["gloo"], "%.1f"), f" ({algo})" if algo else "", cell(lat["mpi"], "%.1f")))
print(f"\nJSON and logs in {out}")
EOF
