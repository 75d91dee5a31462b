#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang) into ${RCOLL_FUZZ_BUILD_DIR:-build-fuzz}
# and runs each for ${RCOLL_FUZZ_SECONDS:-60} s, all at once and at low priority,
# starting from the committed seed corpus (a copy: the repository is not written).
# Any crash, sanitizer finding, leak, timeout (-timeout) or oversized allocation
# (-malloc_limit_mb, -rss_limit_mb) fails the script and leaves the input that
# triggered it in the fuzz build directory.
#   scripts/fuzz.sh            build and run
#   scripts/fuzz.sh build      build only
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${RCOLL_FUZZ_BUILD_DIR:-build-fuzz}
seconds=${RCOLL_FUZZ_SECONDS:-60}
fuzzers=(frame_fuzzer store_fuzzer env_fuzzer)

CC=${RCOLL_FUZZ_CC:-clang} CXX=${RCOLL_FUZZ_CXX:-clang++} \
  cmake -S tests/fuzz -B "$build_dir" -G Ninja >/dev/null
ninja -C "$build_dir" -j "${RCOLL_JOBS:-$(nproc)}"
[[ ${1:-run} == build ]] && exit 0

runs=$build_dir/runs
rm -rf "$runs"
mkdir -p "$runs"
pids=()
for f in "${fuzzers[@]}"; do
  mkdir -p "$runs/$f/corpus" "$runs/$f/artifacts"
  cp tests/fuzz/corpus/$f/* "$runs/$f/corpus/"
  nice -n 10 "$build_dir/$f" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -print_final_stats=1 -artifact_prefix="$runs/$f/artifacts/" "$runs/$f/corpus" >"$runs/$f/log" 2>&1 &
  pids+=($!)
done
fail=0
for i in "${!fuzzers[@]}"; do
  f=${fuzzers[i]}
  code=0
  wait "${pids[i]}" || code=$?
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$runs/$f/log" | grep -oE '[0-9]+$' || echo '?')
  cov=$(grep -oE 'cov: [0-9]+' "$runs/$f/log" | tail -1 || true)
  if [[ $code -ne 0 ]] || ls "$runs/$f/artifacts/"* >/dev/null 2>&1; then
    echo "fuzz: $f FAILED (exit $code) after $execs runs; input(s) in $runs/$f/artifacts/:"
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$runs/$f/log" | head -20
    fail=1
  else
    echo "fuzz: $f ok: ${seconds} s, $execs runs, ${cov:-cov: ?}, no findings"
  fi
done
exit $fail
