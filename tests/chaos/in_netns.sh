#!/usr/bin/env bash
# in_netns.sh PREFIX PROGRAM [ARGS...]
# The per-rank wrapper of the chaos tests: rcoll-run starts it as every rank,
# and it becomes PROGRAM inside the rank's own network namespace PREFIX-r<RANK>
# (ip netns exec execs, so the pid rcoll-run knows is the rank's). A variable
# CHAOS_ENV_R<RANK>="VAR=value ..." adds environment for that rank only.
set -eu
prefix=$1
shift
extra_var="CHAOS_ENV_R${RCOLL_RANK}"
extra=()
if [[ -n ${!extra_var:-} ]]; then read -r -a extra <<<"${!extra_var}"; fi
exec ip netns exec "${prefix}-r${RCOLL_RANK}" env "${extra[@]}" "$@"
