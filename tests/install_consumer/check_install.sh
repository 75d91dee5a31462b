#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs a
# consumer with find_package(rcoll) and another with pkg-config.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
ninja -C "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer"
PKG_CONFIG_PATH=$(dirname "$(find "$work/prefix" -name rcoll.pc)")
export PKG_CONFIG_PATH
g++ -o "$work/pc_consumer" "$src_dir/consumer.cc" $(pkg-config --cflags --libs rcoll) -pthread
LD_LIBRARY_PATH="$(pkg-config --variable=libdir rcoll)" "$work/pc_consumer"
echo "install check: find_package and pkg-config consumers ok"
