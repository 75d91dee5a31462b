#!/usr/bin/env bash
# Installs what rcoll needs to build, test and benchmark, from Debian packages.
# Safe to run again: packages already present are not fetched.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libboost-dev            # Boost.Asio (TCP transport, store)
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev             # baseline for rcoll-bench comparisons
  gnuplot-nox             # rcoll-bench --plot (busbw against size, PNG)
  libopenmpi-dev openmpi-bin
  libucx-dev              # optional UCX transport
  iproute2                # network-namespace chaos tests (ip, tc, nstat)
  nftables                # chaos tests: packet loss on kernels without tc netem
  procps                  # chaos tests: ps
  clang libclang-rt-14-dev  # libFuzzer targets (tests/fuzz) with ASan/UBSan
  clang-format-14         # scripts/check_format.sh: changed lines as .clang-format writes them
  python3 python3-venv    # python3-venv: the PyTorch venv (scripts/install-torch.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
