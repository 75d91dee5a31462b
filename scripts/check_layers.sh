#!/usr/bin/env bash
# The layering check (DESIGN.md, "Layers"): dependencies point down only.
#
#   include/rcoll   the public API: only its own headers
#   base            base/: logging, deadlines, the ring queue, Status, the
#                   all-gather through the store (store_exchange.h):
#                   what every layer may use; + the public API
#   kernels         + the public API and base
#   transports      + kernels
#   runtime         + transports
#   python, tools   the public API (tools: + base, + what the launcher shares)
#
# Prints every include that reaches up, with its file and line, and exits 1
# if there is one. The build runs it (target check_layers, a dependency of
# the library), so an upward include fails the build, not just CI.
#
#   scripts/check_layers.sh [ROOT]
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

base='base/[a-z_]+\.h'
bad=0
# layer directory, then the include pattern it may use (an extended regex on
# the quoted path).
check() {
  local dir=$1 allowed=$2
  [[ -d $dir ]] || return 0
  while IFS= read -r hit; do
    local path=${hit#*\"}
    path=${path%%\"*}
    # Same-directory includes ("tensors.h") are the unit's own.
    [[ $path != */* ]] && continue
    if ! [[ $path =~ ^($allowed)$ ]]; then
      echo "layering: ${hit%%:#*}: includes \"$path\", above its layer ($dir may include $allowed)"
      bad=1
    fi
  # Build folders inside a layer (pip's python/build/, the build's generated
  # header checks there) are not its source.
  done < <(grep -rnE '^#include "' "$dir" --include='*.h' --include='*.cc' --include='*.cu' --exclude-dir='build*')
}

check include/rcoll 'rcoll/[a-z_]+\.h'
check base "rcoll/[a-z_]+\.h|$base"
check kernels "rcoll/[a-z_]+\.h|kernels/[a-z_]+\.h|$base"
check transports "rcoll/[a-z_]+\.h|kernels/[a-z_]+\.h|transports/[a-z_/]+\.h|$base"
check runtime "rcoll/[a-z_]+\.h|kernels/[a-z_]+\.h|transports/[a-z_/]+\.h|runtime/[a-z_/]+\.h|$base"
check python 'rcoll/[a-z_]+\.h'
check tools "rcoll/[a-z_]+\.h|tools/[a-z_/]+\.h|$base"

if ((bad)); then
  echo "layering: dependencies must point down (scripts/check_layers.sh says which may include what)" >&2
  exit 1
fi
exit 0
