#!/usr/bin/env bash
# The test job: install, build, run every test (unit and multi-process) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build_dir=${RCOLL_BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure --timeout 1200 -j "${RCOLL_TEST_JOBS:-1}" "$@"
