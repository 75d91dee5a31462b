#!/usr/bin/env bash
# clang-format on changed lines: every C++ line changed since the base commit
# must be as clang-format (the .clang-format at the root, clang-format 14)
# writes it. Lines nobody touched are left alone, so the check never asks for
# a mass reformat, and what is written from now on is formatted.
#
#   scripts/check_format.sh [BASE]   BASE defaults to .ci/format-base, the
#                                    commit the check started from
#
# Prints the diff clang-format asks for and exits 1 when there is one; the
# fix is `git clang-format --binary clang-format-14 BASE`. The test job
# (scripts/test.sh) runs it before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(cat .ci/format-base)}
binary=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z $binary ]]; then
  echo "check_format: no clang-format (scripts/install-deps.sh installs clang-format-14)" >&2
  exit 2
fi
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "check_format: base commit $base is not in this clone (a shallow clone? fetch its history)" >&2
  exit 2
fi
out=$(git clang-format --binary "$binary" --diff --extensions cc,h,cu,cpp "$base" -- \
      include base kernels transports runtime tools python/src tests bench)
case $out in
  "" | "no modified files to format" | "clang-format did not modify any files")
    echo "check_format: every C++ line changed since ${base:0:10} is formatted"
    exit 0 ;;
esac
printf '%s\n' "$out"
echo "check_format: the lines above are not as clang-format writes them;" \
     "run: git clang-format --binary $binary ${base:0:10}" >&2
exit 1
