#!/usr/bin/env bash
# DDP step time on CPU, rcoll against gloo, in alternating rounds (this host
# is noisy: each round runs every configuration once, back to back).
#
#   bench/ddp_step_time.sh [RANKS=4] [ROUNDS=3]
#
# Configurations: gloo; rcoll with its default transport; rcoll pinned to tcp;
# rcoll pinned to ucx; rcoll with RCOLL_SPIN_US=0 or 50 (CONFIGS="gloo
# rcoll-default" runs only those; the default runs the first four). Prints each run's median step time, then per
# configuration the median over rounds and its ratio to gloo's.
# Needs the build and .venv-torch; builds the in-tree module (build/python,
# put on PYTHONPATH) if it is not there.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-4} rounds=${2:-3}
py=${RCOLL_TORCH_PYTHON:-.venv-torch/bin/python}
build=${RCOLL_BUILD_DIR:-build}
cmake --build "$build" --target rcoll_torch >/dev/null
out=$(mktemp -d)
# name:backend:transport:extra environment
all=("gloo:gloo::" "rcoll-default:rcoll::" "rcoll-tcp:rcoll:tcp:" "rcoll-ucx:rcoll:ucx:"
     "rcoll-spin0:rcoll::RCOLL_SPIN_US=0" "rcoll-spin50:rcoll::RCOLL_SPIN_US=50")
configs=()
for c in "${all[@]}"; do
  [[ " ${CONFIGS:-gloo rcoll-default rcoll-tcp rcoll-ucx} " == *" ${c%%:*} "* ]] && configs+=("$c")
done
for ((round = 1; round <= rounds; ++round)); do
  for c in "${configs[@]}"; do
    IFS=: read -r name backend transport extra <<<"$c"
    env PYTHONPATH="$PWD/$build/python" ${transport:+RCOLL_TRANSPORT=$transport} $extra \
      "$py" -m torch.distributed.run --standalone --nproc-per-node "$ranks" bench/ddp_step_time.py \
      --backend "$backend" --out "$out/$name.$round.json" >"$out/$name.$round.log" 2>&1 ||
      { echo "run $name round $round failed:"; tail -20 "$out/$name.$round.log"; exit 1; }
  done
done
"$py" - "$out" "$rounds" "${configs[@]%%:*}" <<'PY'
import json, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = {}
for n in names:
    per_round = []
    for r in range(1, rounds + 1):
        d = json.load(open(f"{out}/{n}.{r}.json"))
        per_round.append(statistics.median(d["step_s"]))
    med[n] = statistics.median(per_round)
    print(f"{n:14s} transport {d['transport']:4s} rounds " + " ".join(f"{1000 * t:6.1f}" for t in per_round) +
          f"  median {1000 * med[n]:6.1f} ms  ({d['params'] / 1e6:.1f}M parameters)")
for n in names[1:]:
    print(f"{n:14s} / gloo: {med[n] / med['gloo']:.2f}x")
PY
