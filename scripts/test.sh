#!/usr/bin/env bash
# The test job: install, check formatting (scripts/check_format.sh: clang-format
# on the lines changed since .ci/format-base), build (which also checks the
# layering and that every header stands alone), run every test (unit, multi-process, PyTorch backend) with CTest,
# then the hardening stages (each logged, each failing the job on a finding):
#   chaos      the chaos suite (ctest -L chaos: network namespaces, netem/nft/tbf,
#              SIGSTOP/SIGKILL, a frozen store host), the fuzzers running beside it
#              (scripts/fuzz.sh: frame, store, env; RCOLL_FUZZ_SECONDS each, default 60)
#              and then the two sanitizer builds below (unity builds, niced)
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

# Two at a time by default (one per core here): the tests whose checks depend
# on timing are RUN_SERIAL (tests/multiprocess.cmake, the liveness tests in
# tests/CMakeLists.txt), so they still run alone.
(cd "$build_dir" && ctest --output-on-failure --timeout 1200 -j "${RCOLL_TEST_JOBS:-$jobs}" -LE "chaos|sanitize|tsan" "$@")
if [[ $hardening != 1 ]]; then exit 0; fi
failed=()

# ---- chaos suite; beside it, at a lower priority, the fuzzers (nice 10) and
# then the sanitizer builds (nice 15) (the suite mostly waits on the network and the clock:
# its scenarios passed with both cores busy fuzzing for their first minute)
stage "building the fuzzers (clang, libFuzzer + ASan/UBSan)"
scripts/fuzz.sh build
# The sanitizer builds are unity builds (a target's sources compiled a few at a
# time as one: the library in a third less time; the main build above compiles
# every file on its own, which also shows a source that leans on another's
# includes). A failed build fails the job and skips its run, with its log shown.
# UCX stays on in build-asan (the UCX transport is sanitized too: the
# communicator tests run on ucx and tcp); build-tsan builds without it
# (libucp is uninstrumented). Line tables only (-g1, in place of Debug's -g):
# reports keep file:line, and the builds take a quarter less time.
sanitizer_build() {  # sanitizer_build DIR SANITIZERS TARGETS... (extra CMake arguments in $cmake_extra)
  local dir=$1 sanitize=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1" \
    -DCMAKE_UNITY_BUILD=ON -DRCOLL_SANITIZE="$sanitize" -DRCOLL_BUILD_BENCH=OFF -DRCOLL_BUILD_PYTHON=OFF \
    -DRCOLL_WITH_CUDA=OFF "${cmake_extra[@]}" >/dev/null &&
    ninja -C "$dir" -j "$jobs" "$@"
}
asan_targets=(communicator_test store_test liveness_test bootstrap_test frame_test inject_test launcher_test
              kernels_test security_test transport_chain_test rcoll-correctness-worker rcoll-pipeline-worker rcoll-run)
tsan_targets=(communicator_test liveness_test store_test security_test hand_off_test rcoll-correctness-worker rcoll-pipeline-worker
              rcoll-run)
# Ends the side job's processes (it is not a process group of its own), if the script ends first.
kill_tree() {
  local child
  for child in $(pgrep -P "$1" || true); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stage "chaos suite (ctest -L chaos); beside it the fuzzers for ${RCOLL_FUZZ_SECONDS:-60} s each, then the sanitizer builds"
side_failed=$root/build-side-failed.txt
rm -f "$build_dir/chaos-results.txt" "$side_failed"
(
  scripts/fuzz.sh run >"$root/build-fuzz-report.txt" 2>&1 || echo fuzz >>"$side_failed"
  renice -n 15 -p "$BASHPID" >/dev/null || true  # the builds: after the chaos suite's processes
  building=$(date +%s)
  cmake_extra=()
  sanitizer_build build-asan address,undefined "${asan_targets[@]}" >"$root/build-asan.log" 2>&1 ||
    echo asan-build >>"$side_failed"
  cmake_extra=(-DRCOLL_WITH_UCX=OFF)
  sanitizer_build build-tsan thread "${tsan_targets[@]}" >"$root/build-tsan.log" 2>&1 ||
    echo tsan-build >>"$side_failed"
  echo "sanitizer builds: $(( $(date +%s) - building )) s" >>"$root/build-tsan.log"
) &
side_pid=$!
trap 'kill_tree "$side_pid"' EXIT
(cd "$build_dir" && ctest --output-on-failure --timeout 300 -L chaos) || failed+=(chaos)
if [[ -f $build_dir/chaos-results.txt ]]; then
  echo "fault scenarios (measured by this run):"
  tests/chaos/fault_table.sh "$build_dir/chaos-results.txt" || true
fi
stage "waiting for the fuzzers and the sanitizer builds beside the chaos suite"
wait "$side_pid" || echo side-job >>"$side_failed"
trap - EXIT
side_step_failed() { grep -qx "$1" "$side_failed" 2>/dev/null; }
grep -E '^fuzz:|ERROR|SUMMARY|runtime error' "$root/build-fuzz-report.txt" || true
if side_step_failed fuzz; then failed+=(fuzz); fi
if side_step_failed side-job; then failed+=(side-job); fi
tail -n 1 "$root/build-tsan.log" || true
for san in asan tsan; do
  if side_step_failed $san-build; then
    echo "test.sh: the $san build failed:"
    cat "$root/build-$san.log"
    failed+=($san-build)
  fi
done
rm -f "$root/build-fuzz-report.txt" "$root/build-asan.log" "$root/build-tsan.log"

# ---- AddressSanitizer + UBSan
stage "AddressSanitizer + UBSan run (ctest -L 'unit|sanitize')"
side_step_failed asan-build || (cd build-asan &&
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  RCOLL_SANITIZED=1 ctest --output-on-failure --timeout 600 -j "$jobs" -L "unit|sanitize") || failed+=(asan)

# ---- ThreadSanitizer
stage "ThreadSanitizer run (ctest -L 'unit|tsan')"
side_step_failed tsan-build || (cd build-tsan &&
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  RCOLL_SANITIZED=1 ctest --output-on-failure --timeout 600 -j "$jobs" -L "unit|tsan") || failed+=(tsan)

rm -f "$side_failed"
stage "hardening stages done in $(( $(date +%s) - t0 )) s"
if ((${#failed[@]} > 0)); then
  echo "test.sh: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "test.sh: all stages passed"
