#!/usr/bin/env bash
# Installs PyTorch for the rcoll backend (python/) and its tests into a venv
# (${RCOLL_TORCH_VENV:-.venv-torch}), pinned to one version. Safe to run again:
# a venv that already imports that version is kept.
#
# PyPI's Linux wheel of torch is a CUDA build that depends on ~3 GB of nvidia-*
# wheels. For CPU use it needs only the CUDA libraries it links against; on a
# machine that has the CUDA 13 toolkit (as the CI machines do) all but three
# of them are already there, so the light path installs the torch wheel
# without its dependencies, its pure-Python dependencies, and those three
# (cuFile, cuSPARSELt, NVSHMEM: ~230 MB). If torch still does not import, the
# full dependency set is installed instead.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${RCOLL_TORCH_VENV:-.venv-torch}
version=2.11.0
python=${RCOLL_PYTHON:-python3}
started=$SECONDS

imports() {
  "$venv/bin/python" - "$version" <<'PY' 2>/dev/null
import sys
import torch, torch.distributed as dist
from torch.utils import cpp_extension  # what the build asks torch (needs setuptools, which Python 3.12 venvs lack)
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] and dist.is_available() and dist.is_gloo_available() else 1)
PY
}

pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
# pip complains that torch's CUDA wheels are missing: expected on the light path, so
# those lines are dropped (any real failure still prints everything and stops).
quiet() {
  local out
  if ! out=$("$@" 2>&1); then echo "$out" >&2; return 1; fi
  [[ -z $out ]] || grep -v -e "dependency resolver" -e " requires " -e "which is not installed" -e "is incompatible" <<<"$out" || true
}
# What `pip install --no-build-isolation ./python` (the README's install of the
# backend) builds with, from this venv: setuptools with bdist_wheel built in
# (70.1 or later) and wheel. A venv made by an older version of this script
# has setuptools 65 and no wheel, where that install stops with "invalid
# command 'bdist_wheel'".
build_tools=("setuptools==81.0.0" "wheel==0.45.1")
builds() {
  "$venv/bin/python" - <<'PY' 2>/dev/null
import sys
import setuptools, wheel
major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
sys.exit(0 if (major, minor) >= (70, 1) else 1)
PY
}

if [[ -x $venv/bin/python ]] && imports; then
  if ! builds; then
    echo "install-torch: updating the build tools in $venv (${build_tools[*]})"
    quiet "${pip[@]}" "${build_tools[@]}"
  fi
  echo "install-torch: torch $version already in $venv"
  exit 0
fi
echo "install-torch: installing torch $version into $venv"
"$python" -m venv "$venv"
quiet "${pip[@]}" --no-deps "torch==$version"
quiet "${pip[@]}" "filelock==4.2.11" "typing-extensions==4.16.0" "sympy==1.14.0" "mpmath==1.3.0" "networkx==3.6.1" \
  "jinja2==3.1.6" "markupsafe==3.0.4" "fsspec==2026.9.0" "numpy==2.4.6" "${build_tools[@]}"
quiet "${pip[@]}" --no-deps "nvidia-cufile==1.15.1.6" "nvidia-cusparselt-cu13==0.8.0" "nvidia-nvshmem-cu13==3.4.5"
if ! imports; then
  echo "install-torch: torch does not import with the system's CUDA libraries; installing its full dependency set"
  "${pip[@]}" "torch==$version"
  imports || { echo "install-torch: torch $version still does not import from $venv" >&2; exit 1; }
fi
echo "install-torch: torch $version ready in $venv ($((SECONDS - started)) s)"
