# Sourced by bench/compare.sh and bench/compare_transports.sh: finds the build,
# sets up OUTDIR and the common rcoll-bench arguments, and defines measure().
# Expects: out, root, sizes, iters, warmup, and `me` (the script's name for messages);
# TIME, if set, is passed as --time (median, mean or sync).
build=${RCOLL_BUILD_DIR:-}
if [[ -z $build ]]; then
  for d in "$root/build-bench" "$root/build"; do
    if [[ -x $d/bench/rcoll-bench ]]; then build=$d; break; fi
  done
fi
if [[ -z $build || ! -x $build/bench/rcoll-bench || ! -x $build/tools/rcoll-run ]]; then
  echo "$me: no rcoll-bench / rcoll-run found; build them (ninja rcoll-bench rcoll-run) or set RCOLL_BUILD_DIR" >&2
  exit 2
fi
run=$build/tools/rcoll-run
mkdir -p "$out"
common=(--op allreduce --dtype float32 --redop sum --sizes "$sizes" --iters "$iters" --warmup "$warmup"
        ${TIME:+--time "$TIME"})

# Runs one benchmark; its table goes to NAME.log, its rows to NAME.json.
measure() {
  local name=$1; shift
  echo "$me: $name ..." >&2
  rm -f "$out/$name.json"
  if ! "$@" "${common[@]}" --json "$out/$name.json" >"$out/$name.log" 2>&1; then
    echo "$me: $name failed (see $out/$name.log)" >&2
    rm -f "$out/$name.json"
  fi
}
