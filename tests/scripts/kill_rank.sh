#!/usr/bin/env bash
# kill_rank.sh RUNS RANKS VICTIM KILL_AFTER_S -- RCOLL_RUN_COMMAND...
# Runs the job (RANKS ranks) RUNS times. Each time, once every rank said
# "communicator ready" (at most 60 s), it waits KILL_AFTER_S seconds (the
# ranks are then in the middle of their transfers) and SIGKILLs rank VICTIM;
# then it checks that every other rank reported the death as an error ("peer
# dead") and was itself neither ended by a signal nor left running past the
# launcher's --linger, and that no library crashed (a backtrace, an
# assertion). Only signals a process of its own rcoll-run (found by parent
# pid and its RCOLL_RANK). Exit 0 when every run passes.
set -u
runs=$1 ranks=$2 victim=$3 after=$4
shift 5
failed=0
for ((run = 1; run <= runs; ++run)); do
  log=$(mktemp)
  "$@" >"$log" 2>&1 &
  launcher=$!
  for ((i = 0; i < 600; ++i)); do
    (($(grep -c "communicator ready" "$log") >= ranks)) && break
    sleep 0.1
  done
  sleep "$after"
  killed=
  for p in $(ps -o pid= --ppid "$launcher"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RCOLL_RANK=$victim"; then
      kill -KILL "$p" && killed=$p
    fi
  done
  wait "$launcher"
  bad=""
  (($(grep -c "communicator ready" "$log") >= ranks)) || bad+=" not every rank got ready;"
  [[ -n $killed ]] || bad+=" rank $victim was not running when it was to be killed;"
  for ((r = 0; r < ranks; ++r)); do
    ((r == victim)) && continue
    grep -qE "^\[$r\] .*peer dead" "$log" || bad+=" rank $r did not report the death;"
    grep -qE "rank $r \(pid [0-9]+\) was killed by signal" "$log" && bad+=" rank $r was killed by a signal;"
  done
  grep -qE "still running" "$log" && bad+=" a rank was still running past --linger;"
  grep -qE "backtrace|Assertion|process_vm_readv|Segmentation|terminate called" "$log" && bad+=" a library crashed;"
  if [[ -n $bad ]]; then
    echo "kill_rank.sh: run $run: FAIL:$bad"
    grep -E "backtrace|Assertion|process_vm_readv|peer dead|killed by signal|still running" "$log" | head -8
    failed=1
  else
    echo "kill_rank.sh: run $run: rank $victim (pid $killed) killed ${after} s after all $ranks ranks were ready; every other rank reported it (peer dead)"
  fi
  rm -f "$log"
done
exit $failed
