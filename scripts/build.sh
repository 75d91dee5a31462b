#!/usr/bin/env bash
# Configures and builds rcoll into ${RCOLL_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${RCOLL_BUILD_DIR:-build}
jobs=${RCOLL_JOBS:-$(nproc)}
# File by file (not a unity build, as the PyTorch install and the sanitizer
# builds are), even in a folder one of those configured before.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${RCOLL_BUILD_TYPE:-RelWithDebInfo} -DCMAKE_UNITY_BUILD=OFF "$@" >/dev/null
ninja -C "$build_dir" -j "$jobs"
