#!/usr/bin/env bash
# kill_rank.sh RUNS KILL_AFTER_S VICTIM -- RCOLL_RUN_COMMAND...
# Runs the job RUNS times; each time SIGKILLs rank VICTIM KILL_AFTER_S seconds
# in (in the middle of its transfers), and checks that every other rank
# survived to report the death as an error ("peer dead") rather than being
# ended itself (a crash, an assertion or a fatal error inside a library:
# a backtrace). Only signals a process of its own rcoll-run (found by parent
# pid and its RCOLL_RANK). Exit 0 when every run passes.
set -u
runs=$1 after=$2 victim=$3
shift 4
failed=0
for ((run = 1; run <= runs; ++run)); do
  log=$(mktemp)
  "$@" >"$log" 2>&1 &
  launcher=$!
  sleep "$after"
  killed=
  for p in $(ps -o pid= --ppid "$launcher"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RCOLL_RANK=$victim"; then
      kill -KILL "$p" && killed=$p
    fi
  done
  wait "$launcher"
  ranks=$(grep -oE 'RCOLL_WORLD_SIZE=[0-9]+|rank [0-9]+/[0-9]+' "$log" | head -1 | grep -oE '[0-9]+$')
  bad=""
  [[ -n $killed ]] || bad+=" (rank $victim was not running after ${after} s)"
  for ((r = 0; r < ${ranks:-0}; ++r)); do
    ((r == victim)) && continue
    grep -qE "^\[$r\] .*peer dead" "$log" || bad+=" rank $r did not report the death;"
  done
  if grep -qE "backtrace|Assertion|process_vm_readv|Segmentation|terminate called" "$log"; then
    bad+=" a survivor crashed:"
  fi
  if [[ -n $bad ]]; then
    echo "kill_rank.sh: run $run: FAIL$bad"
    grep -E "backtrace|Assertion|process_vm_readv|peer dead|killed by signal" "$log" | head -8
    failed=1
  else
    echo "kill_rank.sh: run $run: rank $victim (pid $killed) killed ${after} s in; every other rank of ${ranks} reported it (peer dead)"
  fi
  rm -f "$log"
done
exit $failed
