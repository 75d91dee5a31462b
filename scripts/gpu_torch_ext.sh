#!/usr/bin/env bash
# Builds rcoll's PyTorch extension here for a GPU machine's Python (3.12 and
# torch 2.11.0 by default: what the lent GPU machines have), into
# build-torch-gpu/python: the rcoll package, its module stripped of debug
# information. scripts/gpu_session.sh puts it on PYTHONPATH there; the shared
# libraries it needs beyond torch's and NCCL's come with scripts/gpu_bundle.sh.
#
#   scripts/gpu_torch_ext.sh          (RCOLL_GPU_PYTHON=3.12: the Python version)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${RCOLL_GPU_PYTHON:-3.12}
venv=.venv-torch${version//./}
python=${RCOLL_PYTHON:-$(ls -d "$HOME"/.pyenv/versions/"$version".*/bin/python3 2>/dev/null | tail -1)}
python=${python:-$(command -v "python$version")}
[[ -x $python ]] || { echo "gpu_torch_ext: no Python $version here (set RCOLL_PYTHON)" >&2; exit 1; }
RCOLL_PYTHON=$python RCOLL_TORCH_VENV=$venv scripts/install-torch.sh
cmake -S . -B build-torch-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRCOLL_TORCH_PYTHON="$PWD/$venv/bin/python" \
  -DRCOLL_BUILD_TESTS=OFF -DRCOLL_BUILD_BENCH=OFF >/dev/null
ninja -C build-torch-gpu -j "${RCOLL_JOBS:-$(nproc)}" rcoll_torch
strip --strip-debug build-torch-gpu/python/rcoll/_C*.so
du -sh build-torch-gpu/python/rcoll
