#!/usr/bin/env bash
# The Python package's GPU tests on a machine with a CUDA device and a CUDA torch already
# installed (the GPU machine's image): builds the package with the CUDA back end for the present
# GPU into a scratch folder, then runs the whole Python suite there (gpu-marked tests included).
#
#   scripts/python_gpu_check.sh [LOG [PYTEST_ARGS...]]   LOG defaults to $OUT/python_gpu.log
# Environment: SMLA_CUDA_ARCHS (default 90a), PYTHON (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:-${OUT:-.}/python_gpu.log}
shift || true
python=${PYTHON:-python3}
site=$(mktemp -d)
{
  echo "== build (SMLA_ENABLE_CUDA=ON, archs ${SMLA_CUDA_ARCHS:-90a})"
  SMLA_ENABLE_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    CMAKE_ARGS="-DSMLA_CUDA_ARCHS=${SMLA_CUDA_ARCHS:-90a} -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20" \
    "$python" -m pip install --quiet --no-build-isolation --no-deps --target "$site" . || exit 1
  echo "== pytest"
  PYTHONPATH="$site" "$python" -X faulthandler -m pytest tests/python -p no:cacheprovider -rs -q "$@"
} >"$log" 2>&1
status=$?
# On a GPU machine a skipped gpu-marked test means torch did not see the device: a failure.
if [[ $status == 0 ]] && grep -q "needs a CUDA device" "$log"; then
  echo "python_gpu_check: gpu tests were skipped: torch sees no CUDA device" >>"$log"
  status=1
fi
tail -15 "$log"
exit $status
