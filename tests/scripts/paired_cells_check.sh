#!/usr/bin/env bash
# paired_cells_check.sh BUILD_DIR
# bench/paired_cells.sh on two small cells, 2 rounds: passes when it exits 0,
# every library wrote its rows for every round, the order rotated (the log of
# round 2 starts with Gloo), and each printed ratio is the median of the
# per-round ratios other/rcoll recomputed here from the JSON. Then a failing
# run (a fake mpirun that exits 5): exit 3, the failure named, and n/a where
# MPI has no rows; and a malformed cell: exit 2.
# Exits 77 (ctest: skipped) with the reason when a program it needs is missing.
set -u
build=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
[[ -x $build/bench/rcoll-gloo-bench ]] || skip "rcoll-gloo-bench is not built (it needs libgloo-dev)"
[[ -x $build/bench/rcoll-mpi-bench ]] || skip "rcoll-mpi-bench is not built (it needs Open MPI)"
command -v mpirun >/dev/null || skip "mpirun is not on PATH"
command -v python3 >/dev/null || skip "python3 is not on PATH"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/paired_cells.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
export RCOLL_BUILD_DIR=$build ROUNDS=2 ITERS=3 WARMUP=1
cells=(2xallreducex4K 2xbroadcastx8K)

"$root/bench/paired_cells.sh" "$tmp/ok" "${cells[@]}" >"$tmp/out" 2>"$tmp/err"
code=$?
cat "$tmp/out"
check "exits 0 (got $code)" test "$code" -eq 0
for cell in "${cells[@]}"; do
  for lib in rcoll gloo mpi; do
    for r in 1 2; do
      check "$cell $lib round $r has rows" python3 -c "import json,sys; sys.exit(0 if json.load(open('$tmp/ok/$cell/$lib-$r.json'))['rows'] else 1)"
    done
  done
done
first_of_round2() { grep -m 1 "round 2/2" "$tmp/err" | grep -q "2xallreducex4K round 2/2: gloo"; }
check "the order rotates: round 2 starts with Gloo" first_of_round2
# The printed ratios against the JSON: median over rounds of other/rcoll (two rounds: the mean).
check "ratios are other/rcoll per round, median over rounds" python3 - "$tmp/ok" "$tmp/out" "${cells[@]}" <<'PY'
import json, statistics, sys
out, table, cells = sys.argv[1], open(sys.argv[2]).read().splitlines(), sys.argv[3:]
t = lambda cell, lib, r: json.load(open(f"{out}/{cell}/{lib}-{r}.json"))["rows"][0]["time_us"]
for cell in cells:
    line = next(l for l in table if l.split() and l.split()[0] == cell)
    words = line.split()
    for lib, at in (("gloo", 4), ("mpi", 6)):
        want = statistics.median([t(cell, lib, r) / t(cell, "rcoll", r) for r in (1, 2)])
        got = float(words[at])
        if abs(got - want) > 0.006:
            sys.exit(f"{cell} {lib}/rcoll: printed {got}, JSON gives {want:.3f}")
PY

# A baseline that fails: exit 3, named, n/a for it only.
mkdir -p "$tmp/fake"
printf '#!/bin/sh\necho "fake mpirun: failing on purpose" >&2\nexit 5\n' >"$tmp/fake/mpirun"
chmod +x "$tmp/fake/mpirun"
ROUNDS=1 PATH=$tmp/fake:$PATH "$root/bench/paired_cells.sh" "$tmp/fails" 2xallreducex4K >"$tmp/out" 2>"$tmp/err"
code=$?
cat "$tmp/out" "$tmp/err"
check "a failing baseline exits 3 (got $code)" test "$code" -eq 3
check "the failure is named" grep -q "2xallreducex4K round 1: mpi failed" "$tmp/err"
check "n/a for mpi, numbers for gloo" grep -Eq "^ *2xallreducex4K +[0-9.]+ +[0-9.]+ +n/a .*[0-9]\.[0-9]+ \(.*n/a" "$tmp/out"

"$root/bench/paired_cells.sh" "$tmp/bad" 2xallreduce >"$tmp/out" 2>&1
code=$?
cat "$tmp/out"
check "a malformed cell exits 2 (got $code)" test "$code" -eq 2
check "and says why" grep -q "bad cell '2xallreduce'" "$tmp/out"
exit $fail
