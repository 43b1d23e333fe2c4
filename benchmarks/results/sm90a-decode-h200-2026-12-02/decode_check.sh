#!/usr/bin/env bash
# Build everything (sm_90a), run the decode GPU tests on the Hopper decode (default) and a decode
# bench of both kernels. Writes to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; DEPS_SRC=$ROOT/.gpu-deps; BUILD=$ROOT/build-gpu
t0=$(date +%s)
{
cmake -S "$DEPS_SRC/googletest" -B "$BUILD/_deps/gtest" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$BUILD/_deps/install" && cmake --build "$BUILD/_deps/gtest" -j 16 && cmake --install "$BUILD/_deps/gtest" &&
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "-DCMAKE_PREFIX_PATH=$BUILD/_deps/install;$DEPS_SRC" ${EXTRA_CMAKE:-} && cmake --build $BUILD -j 16
} > $OUT/build.log 2>&1 || { echo BUILD FAILED; grep -B2 -A10 "error" $OUT/build.log | head -60; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
T=$BUILD/tests/cpp/sparse_mla_gpu_tests
[[ -x $T ]] || T=$(find $BUILD -name sparse_mla_gpu_tests -type f | head -1)
F=${FILTER:-'Formats/PortableDecode.*:DecodeGraphGpu.*:-*TwoGigabytes*'}
t0=$(date +%s)
SMLA_DECODE_SM90A=1 timeout 100 $T --gtest_filter="$F" > $OUT/decode_tests.log 2>&1; echo "decode tests rc $? $(( $(date +%s) - t0 )) s"
grep -E "^\[  (FAILED|PASSED) |tests ran" $OUT/decode_tests.log | head -20
grep -m5 -A12 "Failure" $OUT/decode_tests.log | head -60
if ! grep -q "PASSED" $OUT/decode_tests.log || grep -q "FAILED" $OUT/decode_tests.log; then exit 1; fi
if [[ -n ${SAN:-} ]]; then
  t0=$(date +%s)
  SMLA_DECODE_SM90A=1 timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $T --gtest_filter='Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.LongListsSplit/v32_fp8' > $OUT/memcheck.log 2>&1; echo "memcheck rc $? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/memcheck.log
  SMLA_DECODE_SM90A=1 timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool synccheck $T --gtest_filter='Formats/PortableDecode.ExtraCacheAndPages/v4_fp8' > $OUT/synccheck.log 2>&1; echo "synccheck rc $?"; tail -2 $OUT/synccheck.log
fi
if [[ -n ${BENCH:-} ]]; then
  for k in 1 0; do
    SMLA_DECODE_SM90A=$k timeout 70 $BUILD/sparse-mla bench --backend cuda --suite v32,v4 --filter decode --iters 20 --json $OUT/bench_sm90a$k.json > $OUT/bench_sm90a$k.log 2>&1; echo "bench sm90a=$k rc $?"
  done
fi
