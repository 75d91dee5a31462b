#!/usr/bin/env bash
# The test job: install, check formatting (scripts/check_format.sh: clang-format
# on the lines changed since .ci/format-base), build (which also checks the
# layering and that every header stands alone), run every test (unit, multi-process, PyTorch backend) with CTest,
# then the hardening stages (each logged, each failing the job on a finding),
# whose builds (scripts/hardening-builds.sh) run beside the main CTest run:
#   chaos      the chaos suite (ctest -L chaos: network namespaces, netem/nft/tbf,
#              SIGSTOP/SIGKILL, a frozen store host), the fuzzers running beside it
#              (scripts/fuzz.sh: frame, store, env; RCOLL_FUZZ_SECONDS each, default 60)
#   asan       AddressSanitizer + UBSan build of the unit tests and a small
#              multi-process subset (ctest -L "unit|sanitize")
#   tsan       ThreadSanitizer build of the concurrency tests (communicator,
#              liveness, store) and one small multi-process run (ctest -L "unit|tsan")
# Extra arguments go to the main ctest run only; with extra arguments the
# hardening stages are skipped unless RCOLL_HARDENING=1. RCOLL_HARDENING=0 skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# PyTorch (pinned, in .venv-torch) for the torch backend's tests; RCOLL_SKIP_TORCH=1 skips them.
[[ ${RCOLL_SKIP_TORCH:-0} == 1 ]] || scripts/install-torch.sh
scripts/check_format.sh
scripts/build.sh
root=$(pwd)
build_dir=${RCOLL_BUILD_DIR:-build}
jobs=${RCOLL_JOBS:-$(nproc)}
hardening=${RCOLL_HARDENING:-$(( $# == 0 ? 1 : 0 ))}

t0=$(date +%s)
stage_start=$t0
stage() {
  local now
  now=$(date +%s)
  echo
  echo "=== test.sh: $* (previous stage took $((now - stage_start)) s) ==="
  stage_start=$now
}

# The hardening stages' builds (scripts/hardening-builds.sh: the fuzzers,
# ASan/UBSan, TSan; about 14 min of CPU time) run beside the main CTest run,
# at idle priority (SCHED_IDLE: a build gets a CPU only when no test wants
# it, so the tests, the timing-dependent ones too, keep the machine as they
# had it). The main run mostly waits (sockets, the stalls and timeouts it
# injects), and its idle CPU time pays for most of those builds.
if [[ $hardening == 1 ]]; then
  builds_log=$(cd "$build_dir" && pwd)/hardening-builds.log
  setsid chrt --idle 0 scripts/hardening-builds.sh >"$builds_log" 2>&1 &
  builds_pid=$!  # its own process group (setsid): stopped whole if the job ends early
  trap 'kill -- -"$builds_pid" 2>/dev/null || true' EXIT
fi

# Two at a time by default (one per core here): the tests whose checks depend
# on timing are RUN_SERIAL (tests/multiprocess.cmake, the liveness tests in
# tests/CMakeLists.txt), so they still run alone.
main_status=0
(cd "$build_dir" && ctest --output-on-failure --timeout 1200 -j "${RCOLL_TEST_JOBS:-$jobs}" -LE "chaos|sanitize|tsan" "$@") ||
  main_status=$?
if [[ $hardening != 1 || $main_status != 0 ]]; then exit "$main_status"; fi
failed=()

stage "waiting for the hardening builds (run at idle priority beside the main CTest run)"
builds_status=0
wait "$builds_pid" || builds_status=$?
trap - EXIT
cat "$builds_log"
rm -f "$builds_log"
if [[ $builds_status != 0 ]]; then
  echo "test.sh: FAILED stages: hardening builds"
  exit 1
fi

# ---- chaos suite, with the fuzzers beside it (the suite mostly waits on the network)
stage "chaos suite (ctest -L chaos), fuzzers running beside it for ${RCOLL_FUZZ_SECONDS:-60} s each"
scripts/fuzz.sh run >"$root/build-fuzz-report.txt" 2>&1 &
fuzz_pid=$!
rm -f "$build_dir/chaos-results.txt"
(cd "$build_dir" && ctest --output-on-failure --timeout 300 -L chaos) || failed+=(chaos)
wait "$fuzz_pid" || failed+=(fuzz)
tail -n +1 "$root/build-fuzz-report.txt" | grep -E '^fuzz:|ERROR|SUMMARY|runtime error' || true
rm -f "$root/build-fuzz-report.txt"
if [[ -f $build_dir/chaos-results.txt ]]; then
  echo "fault scenarios (measured by this run):"
  tests/chaos/fault_table.sh "$build_dir/chaos-results.txt"
fi

# ---- AddressSanitizer + UBSan
stage "AddressSanitizer + UBSan run (ctest -L 'unit|sanitize')"
(cd build-asan &&
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  RCOLL_SANITIZED=1 ctest --output-on-failure --timeout 600 -j "$jobs" -L "unit|sanitize") || failed+=(asan)

# ---- ThreadSanitizer
stage "ThreadSanitizer run (ctest -L 'unit|tsan')"
(cd build-tsan &&
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  RCOLL_SANITIZED=1 ctest --output-on-failure --timeout 600 -j "$jobs" -L "unit|tsan") || failed+=(tsan)

stage "hardening stages done in $(( $(date +%s) - t0 )) s"
if ((${#failed[@]} > 0)); then
  echo "test.sh: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "test.sh: all stages passed"
