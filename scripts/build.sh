#!/usr/bin/env bash
# Configures and builds rcoll into ${RCOLL_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${RCOLL_BUILD_DIR:-build}
jobs=${RCOLL_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${RCOLL_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
ninja -C "$build_dir" -j "$jobs"
