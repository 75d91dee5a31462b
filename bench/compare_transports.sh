#!/usr/bin/env bash
# Compares rcoll's transports on this host with Open MPI's shared-memory path:
# allreduce, float32, sum, at 2 and 4 ranks: rcoll over UCX, rcoll over TCP,
# Open MPI with the vader (shared memory) BTL, back to back in one run.
#
#   bench/compare_transports.sh [OUTDIR]          (default ./bench-results)
#
# Writes OUTDIR/{ucx,tcp,vader}-np{2,4}.json and .log, then prints per rank
# count: busbw of each, ucx/vader and ucx/tcp, and the small-message latency
# (8 B and 4 KiB) of each. Environment: RCOLL_BUILD_DIR, RANKS ("2 4"),
# SIZES (8,4K,64K:256M), ITERS (20), WARMUP (5).
set -euo pipefail

out=${1:-./bench-results}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ranks=${RANKS:-"2 4"}
sizes=${SIZES:-8,4K,64K,256K,1M,4M,16M,64M,256M}
iters=${ITERS:-20}
warmup=${WARMUP:-5}

me=compare_transports.sh
# shellcheck source=bench/bench_common.sh
source "$root/bench/bench_common.sh"

for n in $ranks; do
  measure "ucx-np$n" "$run" -n "$n" -- "$build/bench/rcoll-bench" --transport ucx
  measure "tcp-np$n" "$run" -n "$n" -- "$build/bench/rcoll-bench" --transport tcp
  if [[ -x $build/bench/rcoll-mpi-bench ]] && command -v mpirun >/dev/null; then
    measure "vader-np$n" mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl vader,self \
      "$build/bench/rcoll-mpi-bench"
  fi
done

python3 - "$out" $ranks <<'PY'
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
    libs = {k: load(f"{k}-np{n}") for k in ("ucx", "tcp", "vader")}
    bw = lambda k, s: libs[k][s]["busbw"] if s in libs[k] else None
    ratio = lambda a, b: a / b if a is not None and b else None
    print(f"\nallreduce float32 sum, {n} ranks, busbw in GB/s")
    print("%12s %10s %10s %10s %11s %9s" % ("size (B)", "rcoll ucx", "rcoll tcp", "mpi vader", "ucx/vader", "ucx/tcp"))
    for s in sorted(set().union(*libs.values())):
        u, t, v = bw("ucx", s), bw("tcp", s), bw("vader", s)
        print("%12d %10s %10s %10s %11s %9s" % (s, cell(u, "%.3f"), cell(t, "%.3f"), cell(v, "%.3f"),
                                              cell(ratio(u, v), "%.2f"), cell(ratio(u, t), "%.2f")))
    for s in (8, 4096):
        lat = {k: (libs[k][s]["time_us"] if s in libs[k] else None) for k in libs}
        print("%d B latency (us): ucx %s  tcp %s  vader %s  ucx/vader %s" % (
            s, cell(lat["ucx"], "%.1f"), cell(lat["tcp"], "%.1f"), cell(lat["vader"], "%.1f"),
            cell(ratio(lat["ucx"], lat["vader"]), "%.2f")))
print(f"\nJSON and logs in {out}")
PY
