#!/usr/bin/env bash
# The main job: install, build, then a local 4-rank run of rcoll-bench that
# checks every result (exit code non-zero on any wrong value), on every
# transport built in, side by side (--transport all; pass --transport auto
# for the fallback chain alone).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build_dir=${RCOLL_BUILD_DIR:-build}
exec "$build_dir/tools/rcoll-run" -n "${RCOLL_RANKS:-4}" -- "$build_dir/bench/rcoll-bench" --check --transport all "$@"
