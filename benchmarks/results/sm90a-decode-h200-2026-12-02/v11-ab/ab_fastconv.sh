#!/usr/bin/env bash
# v11 (power-of-two conversion path) on the H200: apply the patch, build all, decode suite with the Hopper decode forced, golden; then A/B in one call against the base (gpu_ab's B = base via the reverse patch).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; DEPS_SRC=$ROOT/.gpu-deps; BUILD=$ROOT/build-gpu
# the tree holds v11 (committed); gpu_ab B = base via the reverse patch
t0=$(date +%s)
{
cmake -S "$DEPS_SRC/googletest" -B "$BUILD/_deps/gtest" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$BUILD/_deps/install" && cmake --build "$BUILD/_deps/gtest" -j 16 && cmake --install "$BUILD/_deps/gtest" &&
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "-DCMAKE_PREFIX_PATH=$BUILD/_deps/install;$DEPS_SRC" && cmake --build $BUILD -j 16
} > $OUT/build.log 2>&1 || { echo BUILD FAILED; grep -B2 -A10 "error" $OUT/build.log | head -60; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
G=$(find $BUILD -name sparse_mla_gpu_tests -type f | head -1); C=$(find $BUILD -name sparse_mla_cpu_tests -type f | head -1)
D='Formats/PortableDecode.*:Caches/V41Decode.*:DecodeGraphGpu.*:-*TwoGigabytes*'
summ() { grep -E "^\[  (FAILED|PASSED) |tests ran|Failure|rror" | head -${1:-12}; }
{
echo "== SMLA_DECODE_SM90A=1"; t0=$(date +%s); SMLA_DECODE_SM90A=1 timeout 90 $G --gtest_filter="$D" 2>&1 | summ; echo "rc ${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s"
SMLA_DECODE_SM90A=1 timeout 60 $C --gtest_filter='Cases/Golden*_cuda' 2>&1 | summ 4
echo "== default"; timeout 90 $G --gtest_filter="$D" 2>&1 | summ 4
SMLA_DECODE_SM90A=1 timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $G --gtest_filter='Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.LongListsSplit/v32_fp8' 2>&1 | tail -2
} > $OUT/tests.log 2>&1; cat $OUT/tests.log
grep -A2 "== SMLA_DECODE_SM90A=1" $OUT/tests.log | grep -q PASSED || { echo "TESTS FAILED: no A/B"; exit 1; }
SMLA_AB_ENV=SMLA_DECODE_SM90A=1 SMLA_AB_A_BIN=$BUILD/sparse-mla timeout 330 bash scripts/gpu_ab.sh $OUT/ab devrun/fastconv_reverse.patch --suite v32,v4 --filter decode --iters 20 2>&1 | tail -20
