#!/usr/bin/env bash
# sigstop.sh STOP_AFTER_S FROZEN_S -- RCOLL_RUN_COMMAND...
# Starts the job, freezes one rank (SIGSTOP) STOP_AFTER_S seconds in, and
# thaws it (SIGCONT) FROZEN_S seconds later (never, if FROZEN_S is "forever").
# Prints the job's output and exits with its exit code. Only signals processes
# this script started (the ranks of its own rcoll-run, found by parent pid).
set -u
stop_after=$1 frozen=$2
shift 3
"$@" &
launcher=$!
sleep "$stop_after"
victim=$(ps -o pid= --ppid "$launcher" | sed -n 2p | tr -d ' ')
if [[ -n $victim ]]; then
  echo "sigstop.sh: freezing pid $victim (a rank of rcoll-run pid $launcher) for ${frozen}"
  kill -STOP "$victim"
  if [[ $frozen != forever ]]; then
    sleep "$frozen"
    kill -CONT "$victim" 2>/dev/null
    echo "sigstop.sh: thawed pid $victim"
  fi
else
  echo "sigstop.sh: no rank found to freeze"
fi
wait "$launcher"
code=$?
[[ -n $victim ]] && kill -CONT "$victim" 2>/dev/null
exit $code
