#!/usr/bin/env bash
# Builds the `sparse_mla` Python package into a virtual environment under the repository
# (.venv, reused across runs) and runs the Python tests (tests/python) with pytest.
#
# Torch comes from PyPI. Its Linux wheel depends on ~3 GB of CUDA wheels. Without a GPU (CI), on a
# machine whose CUDA 13 toolkit is on the loader path (ld.so.conf lists /usr/local/cuda-13.0/lib
# here), we install the torch wheel without them plus only the four CUDA libraries the toolkit
# lacks or has too old (NCCL, cuSPARSELt, NVSHMEM, cuFile: ~0.5 GB), and fall back to the full
# install when that torch does not import. With a GPU, torch gets all its CUDA wheels.
# The extension is built without CUDA unless torch sees a GPU and nvcc matches torch's CUDA major
# version (override: SMLA_ENABLE_CUDA=ON|OFF).
#
# Environment: SMLA_VENV (default .venv), SMLA_TORCH_VERSION (default 2.15.0), PYTHON
# (default python3), SMLA_ENABLE_CUDA, CMAKE_ARGS (e.g. -DSMLA_CUDA_ARCHS=90a); extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${SMLA_VENV:-.venv}
torch_version=${SMLA_TORCH_VERSION:-2.15.0}
python=${PYTHON:-python3}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# No wheel cache: torch's wheel would sit on disk twice (cache + unpacked, ~1 GB more at the peak).
# A CI run once failed with "No space left on device" while installing torch.
export PIP_NO_CACHE_DIR=1

log() { echo "python_test: $*"; }

if [[ ! -x $venv/bin/python ]]; then
  log "creating $venv"
  "$python" -m venv "$venv"
fi
py=$venv/bin/python
# --no-warn-conflicts: torch's CUDA requirements are left out on purpose (see above).
pip=("$py" -m pip install --quiet --no-warn-conflicts)

torch_ok() { "$py" -c "import torch; torch.ones(1) + 1" >/dev/null 2>&1; }
installed_torch() { "$py" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null; }

gpu_visible() { nvidia-smi -L >/dev/null 2>&1; }

if [[ $(installed_torch || true) != "$torch_version" ]] || ! torch_ok; then
  if gpu_visible; then
    # Kernels will run: torch gets the CUDA libraries it was built with.
    log "installing torch $torch_version with its CUDA wheels"
    "${pip[@]}" "torch==$torch_version"
  else
    log "installing torch $torch_version without its CUDA wheels"
    "${pip[@]}" --no-deps "torch==$torch_version"
    # torch's pure-Python requirements.
    "${pip[@]}" filelock "typing-extensions>=4.13" "setuptools>=77.0.3" "sympy>=1.13.3" \
      "networkx>=2.5.1" jinja2 "fsspec>=0.8.5"
    # The CUDA libraries torch links that the CUDA 13.0 toolkit lacks (cuFile, cuSPARSELt,
    # NVSHMEM) or has in a version older than torch's (NCCL); pins from torch 2.15.0's metadata.
    "${pip[@]}" --no-deps "nvidia-nccl-cu13==2.30.7" "nvidia-cusparselt-cu13==0.8.1" \
      "nvidia-nvshmem-cu13==3.7.2" "nvidia-cufile==1.17.1.22.*"
  fi
  if ! torch_ok; then
    log "torch does not import with the system CUDA libraries; installing it with its CUDA wheels"
    "${pip[@]}" "torch==$torch_version"
    torch_ok || { log "torch $torch_version does not import"; exit 1; }
  fi
fi
# The build backend, the test runner and the property-based fuzz test's engine (hypothesis);
# numpy only silences torch's warning about its absence.
"${pip[@]}" "scikit-build-core>=0.10" "pytest>=7" "hypothesis>=6" numpy

if [[ -z ${SMLA_ENABLE_CUDA:-} ]]; then
  # CUDA back end only where it can run: a visible GPU and nvcc of torch's CUDA major version.
  torch_cuda=$("$py" -c \
    "import torch; print(torch.version.cuda or '' if torch.cuda.is_available() else '')")
  nvcc_cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' || true)
  if [[ -n $torch_cuda && -n $nvcc_cuda && ${torch_cuda%%.*} == "${nvcc_cuda%%.*}" ]]; then
    SMLA_ENABLE_CUDA=ON
  else
    SMLA_ENABLE_CUDA=OFF
  fi
fi
export SMLA_ENABLE_CUDA
log "building the package (SMLA_ENABLE_CUDA=$SMLA_ENABLE_CUDA)"
# A fixed build folder keeps the CMake build between runs, so a rebuild is incremental.
# --no-deps: resolving the package's torch requirement would pull the CUDA wheels left out above.
"${pip[@]}" --no-build-isolation --no-deps -C build-dir=build-python/{wheel_tag} .

log "running pytest"
set +e
"$py" -m pytest tests/python -p no:cacheprovider -ra "$@"
status=$?
set -e
if [[ $status -eq 5 ]]; then
  log "pytest collected no tests"
  exit 1
fi
exit $status
