#!/usr/bin/env bash
# What creation and one recovery cost at P real ranks on this machine (#37):
# per P, the slowest rank's create() and recovery, the store's requests (the
# launcher's store logs how many it served) for a run without a fault and
# one with (their difference: the recovery's), the descriptors per rank.
#   bench/store_scale.sh [P ...]      (default 8 32 64 96; RUNS=3 medians)
# One close-link fault at op 3 (rank 0's link to rank 1) costs one recovery.
# Needs the build (build/tools/rcoll-run, build/bench/rcoll-scale-probe).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RCOLL_BUILD_DIR:-build}
runs=${RUNS:-3}
sizes=("$@")
((${#sizes[@]})) || sizes=(8 32 64 96)
out=$(mktemp -d)
printf '%5s %10s %12s %22s %24s %8s\n' P "create s" "recovery s" "store requests, no fault" "store requests, one fault" "fds/rank"
for p in "${sizes[@]}"; do
  for ((run = 1; run <= runs; ++run)); do
    for fault in none one; do
      log=$out/$p.$run.$fault.log
      inject=""
      [[ $fault == one ]] && inject="close-link:rank=0,peer=1,op=3"
      RCOLL_DEBUG=info RCOLL_TRANSPORT=tcp RCOLL_INJECT="$inject" \
        "$build/tools/rcoll-run" -n "$p" --timeout 600 -- "$build/bench/rcoll-scale-probe" 5 >"$log" 2>&1 ||
        { echo "P=$p run $run ($fault) failed:"; grep -v INFO "$log" | tail -20; exit 1; }
    done
  done
  python3 - "$out" "$p" "$runs" <<'PY'
import re, statistics, sys
out, p, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
create, recovery, requests, base, fds = [], [], [], [], []
for r in range(1, runs + 1):
    quiet = open(f"{out}/{p}.{r}.none.log").read()
    served = re.findall(r"stopped after (\d+) requests", quiet)
    base.append(int(served[-1]) if served else -1)
    text = open(f"{out}/{p}.{r}.one.log").read()
    rows = re.findall(r"scale-probe rank \d+ of \d+: create ([\d.]+) s, recovery ([\d.]+) s, recoveries (\d+), fds (\d+), wrong (\d+)", text)
    assert len(rows) == p, f"P={p} run {r}: {len(rows)} ranks reported"
    assert all(int(w) == 0 for *_, w in rows), "wrong results"
    create.append(max(float(c) for c, *_ in rows))
    recovery.append(max(float(x) for _, x, *_ in rows))
    fds.append(max(int(f) for *_, f, _ in rows))
    served = re.findall(r"stopped after (\d+) requests", text)
    requests.append(int(served[-1]) if served else -1)
m = statistics.median
print(f"{p:5d} {m(create):10.3f} {m(recovery):12.3f} {int(m(base)):22d} {int(m(requests)):24d} {int(m(fds)):8d}")
PY
done
