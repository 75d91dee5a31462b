#!/usr/bin/env bash
# Packs a build made here (with the CUDA toolkit and NCCL) for a GPU machine
# that has CUDA, NCCL and CMake but none of rcoll's other dependencies (Boost,
# UCX, GoogleTest): the CUDA-labelled tests' executables and the benchmarks,
# stripped, their CTest files, and the shared libraries they load that are
# neither the C/C++ runtime nor CUDA's or NCCL's (the GPU machine's own are
# used). scripts/gpu_tests.sh runs them there.
#
#   scripts/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]     (default build, build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build}
dst=${2:-build-gpu}
[[ -f $src/CMakeCache.txt ]] || { echo "gpu_bundle: no build in $src (run scripts/build.sh first)" >&2; exit 1; }
rm -rf "$dst"
mkdir -p "$dst/lib"

# CTest's files (every directory's, and the gtest lists) keep their places.
(cd "$src" && find . -path '*/CMakeFiles' -prune -o \( -name CTestTestfile.cmake -o -name '*_tests.cmake' -o -name '*_include.cmake' \) -print) |
  while read -r f; do mkdir -p "$dst/$(dirname "$f")" && cp "$src/$f" "$dst/$f"; done

# The executables (linked with the static librcoll), without debug information.
bins=(tests/cuda_kernels_test tests/nccl_comm_test tests/rcoll-nccl-worker tests/rcoll-correctness-worker tests/rcoll-pipeline-worker
      tools/rcoll-run bench/rcoll-bench bench/rcoll-nccl-bench bench/rcoll-cuda-kernels-bench)
for b in "${bins[@]}"; do
  [[ -x $src/$b ]] || { echo "gpu_bundle: $src/$b was not built" >&2; exit 1; }
  mkdir -p "$dst/$(dirname "$b")"
  strip --strip-debug -o "$dst/$b" "$src/$b"
done

# Their libraries, less the ones every Linux has and CUDA's and NCCL's.
for b in "${bins[@]}"; do ldd "$src/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  { grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*|libnccl|libcuda|libcudart)\.so' || true; } |
  while read -r lib; do cp -L "$lib" "$dst/lib/"; done
# UCX loads its transports as modules from a directory beside libucp.
libucp=$(for b in "${bins[@]}"; do ldd "$src/$b"; done | awk '/libucp/ {p = $3} END {print p}')
if [[ -n $libucp && -d $(dirname "$libucp")/ucx ]]; then cp -rL "$(dirname "$libucp")/ucx" "$dst/lib/ucx"; fi

# Where the build's paths point, for gpu_tests.sh to recreate.
pwd > "$dst/SOURCE_ROOT"
echo "$(realpath "$src")" > "$dst/BUILD_DIR"
du -sh "$dst"
