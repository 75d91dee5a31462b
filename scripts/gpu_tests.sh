#!/usr/bin/env bash
# Runs the CUDA-labelled tests and the GPU benchmarks from a bundle made by
# scripts/gpu_bundle.sh, on a GPU machine that has CUDA, NCCL (PyTorch's
# wheel's will do) and CMake but none of rcoll's other dependencies.
#
#   scripts/gpu_tests.sh env                  what the machine has
#   scripts/gpu_tests.sh ctest [ARGS...]      ctest -L cuda ARGS (each test at most
#                                             RCOLL_GPU_TEST_TIMEOUT s, default 240)
#   scripts/gpu_tests.sh run CMD [ARGS...]    one of the bundle's programs (bench/rcoll-bench, ...)
#
# Logs go to stdout; RCOLL_GPU_LOG_DIR (default $OUT if set) keeps copies.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bundle=${RCOLL_GPU_BUNDLE:-$root/build-gpu}
[[ -f $bundle/SOURCE_ROOT ]] || { echo "gpu_tests: no bundle at $bundle (scripts/gpu_bundle.sh makes one)" >&2; exit 1; }

# The build's CTest files name the paths it was made in: make them point here.
src_root=$(cat "$bundle/SOURCE_ROOT") build_dir=$(cat "$bundle/BUILD_DIR")
if [[ $src_root != "$root" && ! -e $src_root ]]; then mkdir -p "$(dirname "$src_root")" && ln -s "$root" "$src_root"; fi
if [[ ! -e $build_dir ]]; then mkdir -p "$(dirname "$build_dir")" && ln -s "$bundle" "$build_dir"; fi
if [[ ! $build_dir -ef $bundle ]]; then
  echo "gpu_tests: $build_dir (where the build was made) exists here and is not the bundle; move it aside" >&2
  exit 1
fi

# NCCL: the system's, else the one PyTorch's wheels bring.
nccl_dir=$(ldconfig -p | awk '/libnccl.so.2 / {print $NF; exit}' | xargs -r dirname)
if [[ -z $nccl_dir ]]; then
  nccl_lib=$(find / -name 'libnccl.so.2*' -path '*nvidia*' -not -path '/proc/*' 2>/dev/null | head -1)
  nccl_dir=${nccl_lib:+$(dirname "$nccl_lib")}
fi
export LD_LIBRARY_PATH=$bundle/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -d $bundle/lib/ucx ]] && export UCX_MODULE_DIR=$bundle/lib/ucx
log_dir=${RCOLL_GPU_LOG_DIR:-${OUT:-}}

stage=${1:-env}
shift || true
case $stage in
  env)
    nvidia-smi -L || true
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
    echo "nproc: $(nproc)  glibc: $(ldd --version | head -1)"
    echo "NCCL: ${nccl_dir:-none found}"
    ls "$nccl_dir" 2>/dev/null
    for b in tools/rcoll-run tests/nccl_comm_test bench/rcoll-bench; do
      missing=$(ldd "$bundle/$b" | grep 'not found')
      echo "$b: ${missing:-every library found}"
    done
    ;;
  ctest)
    cap=${RCOLL_GPU_TEST_TIMEOUT:-240}
    find "$bundle" \( -name CTestTestfile.cmake -o -name "*_tests.cmake" \) -exec sed -i -E "s/TIMEOUT \"?[0-9.]+\"?/TIMEOUT \"$cap\"/" {} +
    ctest --test-dir "$bundle" -L cuda --output-on-failure "$@" 2>&1 | tee ${log_dir:+"$log_dir/ctest.log"}
    ;;
  run)
    prog=$1
    shift
    "$bundle/$prog" "$@"
    ;;
  *)
    echo "gpu_tests: unknown stage '$stage' (env, ctest, run)" >&2
    exit 2
    ;;
esac
