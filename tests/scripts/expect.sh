#!/usr/bin/env bash
# expect.sh EXIT_CODE REGEX MAX_SECONDS -- COMMAND...
# Runs COMMAND; passes when it exits with EXIT_CODE ("nonzero" for any failure),
# its combined output matches the extended REGEX (every '&&'-separated part),
# and it finished within MAX_SECONDS.
set -u
want_code=$1 regex=$2 max_s=$3
shift 4
start=$(date +%s%N)
out=$("$@" 2>&1)
code=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | tail -40
echo "--- exit code $code after ${elapsed_ms} ms"
fail=0
if [[ $want_code == nonzero ]]; then
  [[ $code -ne 0 ]] || { echo "FAIL: expected a non-zero exit code"; fail=1; }
elif [[ $code -ne $want_code ]]; then
  echo "FAIL: expected exit code $want_code"; fail=1
fi
IFS=$'\n' read -r -d '' -a parts < <(echo "$regex" | sed 's/ && /\n/g'; printf '\0')
for part in "${parts[@]}"; do
  echo "$out" | grep -Eq -- "$part" || { echo "FAIL: output does not match: $part"; fail=1; }
done
if (( elapsed_ms > max_s * 1000 )); then echo "FAIL: took longer than ${max_s}s"; fail=1; fi
exit $fail
