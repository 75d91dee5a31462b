#!/usr/bin/env bash
# fault_table.sh RESULTS_FILE: the CHAOS-RESULT lines written by chaos.sh as a
# markdown table (the last result of each scenario), for the README.
set -eu
echo "| scenario | what is injected | outcome | time to detect | time to recover / to the error | result |"
echo "|---|---|---|---|---|---|"
tac "$1" | awk -F'|' '$1 == "CHAOS-RESULT" && !seen[$2]++ { printf "| %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7 }' | tac
