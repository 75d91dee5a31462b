#!/usr/bin/env bash
# The test job: install, build, run every test (unit, multi-process, PyTorch backend) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# PyTorch (pinned, in .venv-torch) for the torch backend's tests; RCOLL_SKIP_TORCH=1 skips them.
[[ ${RCOLL_SKIP_TORCH:-0} == 1 ]] || scripts/install-torch.sh
scripts/build.sh
build_dir=${RCOLL_BUILD_DIR:-build}
cd "$build_dir"
ctest --output-on-failure --timeout 1200 -j "${RCOLL_TEST_JOBS:-1}" "$@"
