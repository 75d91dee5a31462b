#!/usr/bin/env bash
# bench_compare.sh MODE RCOLL_RUN RCOLL_BENCH
# rcoll-bench --compare at 2 ranks on two small sizes (allreduce, float32 sum).
#   MODE all:   --compare gloo,mpi --plot --json; passes when it exits 0, the
#               comparison table has a line of numbers for rcoll, gloo and mpi
#               at each size, the JSON holds rows of all three libraries and
#               the plot is a non-empty PNG.
#   MODE fails: --compare mpi with a fake mpirun first on PATH that exits 5;
#               passes when rcoll-bench exits 3 naming mpi, the exit status and
#               the kept log, and the table shows n/a for mpi only.
#   MODE time:  --time sync --compare mpi: both tables say how time was taken
#               and the JSON carries it; then a fake mpirun whose rows were
#               timed another way (median, where --time mean was asked):
#               exit 3, naming the mismatch.
# Exits 77 (ctest: skipped) with the reason when a program it needs is missing.
set -u
mode=$1 run=$2 bench=$3
bin=$(dirname "$bench")
skip() { echo "SKIPPED: $*"; exit 77; }
need() { [[ -x $bin/$1 ]] || skip "$1 is not built (it needs $2 at configure time)"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_compare.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
has_line() { grep -Eq -- "$1" "$tmp/out"; }

common=(--sizes 4K,64K --iters 2 --warmup 1)
# rcoll-bench ARGS... at 2 ranks with $tmp/fake (a fake mpirun) first on PATH:
# its output in $tmp/out (and shown), its exit status in $code.
bench_with_fake_mpirun() {
  PATH=$tmp/fake:$PATH "$run" -n 2 --timeout 120 -- "$bench" "${common[@]}" "$@" >"$tmp/out" 2>&1
  code=$?
  cat "$tmp/out"
}
# A line of the comparison table as rcoll-run relays it: "[0]  op  size  then numbers".
num='[0-9]+\.[0-9]+'
# Its last cell: the host's steal around each library's timing, rcoll's first
# ("-" where the whole sweep spanned under 20 ticks, "n/a" for a library that failed).
steal_of() { local one='(-|n/a|[0-9]+)' all='(-|n/a|[0-9]+)'; for ((i = 1; i < $1; i++)); do all+="/$one"; done; echo "$all"; }

case $mode in
  all)
    need rcoll-gloo-bench "Gloo (libgloo-dev)"
    need rcoll-mpi-bench "an MPI (libopenmpi-dev)"
    command -v mpirun >/dev/null || skip "mpirun is not on PATH (openmpi-bin)"
    command -v gnuplot >/dev/null || skip "gnuplot is not on PATH (gnuplot-nox)"
    "$run" -n 2 --timeout 120 -- "$bench" "${common[@]}" --compare gloo,mpi \
      --plot "$tmp/x.png" --json "$tmp/x.json" >"$tmp/out" 2>&1
    code=$?
    cat "$tmp/out"
    check "exit code 0 (got $code)" test "$code" -eq 0
    check "table heading names the three libraries" \
      has_line "rcoll GB/s +gloo GB/s +mpi GB/s +rcoll/gloo +rcoll/mpi +rcoll us +gloo us +mpi us"
    for size in 4096 65536; do
      # busbw x3, ratio x2, time x3, steal of 3
      check "table line for allreduce $size with 8 numbers and 3 steals" \
        has_line "^\[0\] +allreduce +$size( +$num){8} +$(steal_of 3)\$"
    done
    for lib in rcoll gloo mpi; do
      check "JSON has 2 allreduce rows of $lib" \
        test "$(grep -Ec "\"op\": \"allreduce\".*\"library\": \"$lib\"" "$tmp/x.json")" -eq 2
    done
    check "JSON parses as JSON" python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp/x.json"
    check "every steal_pct in the JSON is a percentage" python3 -c \
      "import json, sys; sys.exit(not all(0 <= r.get('steal_pct', 0) <= 100 for r in json.load(open(sys.argv[1]))['rows']))" \
      "$tmp/x.json"
    check "PNG is non-empty" test -s "$tmp/x.png"
    check "PNG has the PNG signature" \
      test "$(head -c 8 "$tmp/x.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a
    ;;
  fails)
    need rcoll-mpi-bench "an MPI (libopenmpi-dev)"
    mkdir "$tmp/fake"
    printf '#!/bin/sh\necho "fake mpirun: failing on purpose"\nexit 5\n' >"$tmp/fake/mpirun"
    chmod +x "$tmp/fake/mpirun"
    bench_with_fake_mpirun --compare mpi --compare-dir "$tmp/logs"
    check "exit code 3 (got $code)" test "$code" -eq 3
    check "names mpi and its exit status" has_line "--compare mpi failed after .*: mpirun exited with code 5"
    check "names its log" has_line "mpi's output is in $tmp/logs/mpi.log"
    check "repeats the log's last lines" has_line "\| fake mpirun: failing on purpose"
    check "the log is kept" grep -q "fake mpirun: failing on purpose" "$tmp/logs/mpi.log"
    for size in 4096 65536; do
      check "table line for allreduce $size: rcoll numbers, mpi n/a" \
        has_line "^\[0\] +allreduce +$size +$num +n/a +n/a +$num +n/a +(-|[0-9]+)/n/a\$"
    done
    ;;
  time)
    need rcoll-mpi-bench "an MPI (libopenmpi-dev)"
    command -v mpirun >/dev/null || skip "mpirun is not on PATH (openmpi-bin)"
    sync_line="time: median of per-iteration times per rank, a barrier before each op"
    "$run" -n 2 --timeout 120 -- "$bench" "${common[@]}" --time sync --compare mpi \
      --compare-dir "$tmp/logs" --json "$tmp/x.json" >"$tmp/out" 2>&1
    code=$?
    cat "$tmp/out"
    check "exit code 0 (got $code)" test "$code" -eq 0
    check "rcoll-bench's preamble says how time was taken" has_line "$sync_line"
    check "rcoll-mpi-bench was asked for the same" has_line "rcoll-mpi-bench .*--time sync"
    check "rcoll-mpi-bench's preamble says the same" grep -q "$sync_line" "$tmp/logs/mpi.log"
    check "the JSON says \"time\": \"sync\"" \
      python3 -c "import json, sys; sys.exit(json.load(open(sys.argv[1]))['time'] != 'sync')" "$tmp/x.json"
    for size in 4096 65536; do
      # busbw x2, ratio, time x2, steal of 2
      check "table line for allreduce $size with 5 numbers and 2 steals" \
        has_line "^\[0\] +allreduce +$size( +$num){5} +$(steal_of 2)\$"
    done

    mkdir "$tmp/fake"
    cat >"$tmp/fake/mpirun" <<'FAKE'
#!/bin/sh
# Rows timed by the median whatever --time says.
while [ $# -gt 0 ]; do
  [ "$1" = --json ] && json=$2
  shift
done
printf '{"rows": [{"op": "allreduce", "size": 4096, "time_us": 9, "busbw": 1}], "time": "median"}\n' >"$json"
FAKE
    chmod +x "$tmp/fake/mpirun"
    bench_with_fake_mpirun --time mean --compare mpi --compare-dir "$tmp/logs2"
    check "rows timed another way: exit code 3 (got $code)" test "$code" -eq 3
    check "names the mismatch" has_line "--compare mpi failed after .*: mpi's rows were timed by --time median, not --time mean"
    check "table line for allreduce 4096: mpi n/a" has_line "^\[0\] +allreduce +4096 +$num +n/a +n/a +$num +n/a +(-|[0-9]+)/n/a\$"
    ;;
  *)
    echo "bench_compare.sh: unknown mode '$mode' (all, fails, time)"
    exit 2
    ;;
esac
exit $fail
