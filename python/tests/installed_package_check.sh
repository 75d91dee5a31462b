#!/usr/bin/env bash
# The README's install of the PyTorch backend, then a torchrun DDP job on
# "rcoll" using the installed package (not the build folder):
#
#   installed_package_check.sh PYTHON SOURCE_DIR WORK_DIR
#
# PYTHON is the venv's (scripts/install-torch.sh); the install is the
# README's `pip install --no-build-isolation ./python`, with RCOLL_BUILD_DIR
# under WORK_DIR so that a second run rebuilds only what changed. The job runs
# from WORK_DIR with PYTHONPATH unset, and checks that `rcoll` came from the
# venv's site-packages.
set -euo pipefail
python=$1 src=$2 work=$3
mkdir -p "$work"
echo "== pip install --no-build-isolation ./python (into $("$python" -c 'import sys; print(sys.prefix)'))"
started=$SECONDS
(cd "$src" && RCOLL_BUILD_DIR="$work/pip-build" "$python" -m pip install --quiet --disable-pip-version-check \
   --no-build-isolation ./python)
echo "installed in $((SECONDS - started)) s"
cd "$work"
unset PYTHONPATH
where=$("$python" -c 'import rcoll.torch, os; print(os.path.dirname(rcoll.__file__))')
case $where in
  */site-packages/rcoll) echo "rcoll imports from $where" ;;
  *) echo "FAIL: rcoll imports from $where, not the venv's site-packages" >&2; exit 1 ;;
esac
echo "== torchrun DDP on the installed package"
OMP_NUM_THREADS=1 "$python" -m torch.distributed.run --standalone --nproc-per-node 2 \
  "$src/python/tests/ddp_train.py" --backend rcoll --out "$work/ddp_installed.pt" --steps 20
test -s "$work/ddp_installed.pt" || { echo "FAIL: the DDP job saved no parameters" >&2; exit 1; }
echo "installed package: DDP on rcoll completed"
