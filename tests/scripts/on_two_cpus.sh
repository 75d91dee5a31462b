#!/usr/bin/env bash
# on_two_cpus.sh COMMAND...
# Runs COMMAND on the first two CPUs this script may use (one, if it may use
# only one): a host of at most 2 CPUs, whatever the machine running the tests.
set -eu
cpus=$(python3 -c 'import os; print(",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:2]))')
exec taskset -c "$cpus" "$@"
