#!/usr/bin/env bash
# The `sparse-mla` CLI alone for the H200 (Release, sm_90a, no tests): the build of the device
# calls that only benchmark or profile (scripts/gpu_ab.sh, the call scripts in
# benchmarks/results/). Needs SOURCE/.gpu-deps (scripts/gpu_check.sh --prepare-deps).
#
#   scripts/build_cli.sh SOURCE BUILD LOG [JOBS]    the binary is BUILD/sparse-mla; rc != 0 on failure
set -euo pipefail
SOURCE=${1:?usage: build_cli.sh SOURCE BUILD LOG [JOBS]}
BUILD=${2:?usage: build_cli.sh SOURCE BUILD LOG [JOBS]}
LOG=${3:?usage: build_cli.sh SOURCE BUILD LOG [JOBS]}
JOBS=${4:-16}
SOURCE=$(cd "$SOURCE" && pwd)
cmake -S "$SOURCE" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
  -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  "-DCMAKE_PREFIX_PATH=$SOURCE/.gpu-deps" >"$LOG" 2>&1
cmake --build "$BUILD" -j "$JOBS" --target sparse-mla >>"$LOG" 2>&1
