#!/usr/bin/env bash
# Tree v10 (paired Hopper decode) on top of the default rule: build all; GPU tests with the
# default rule, with the Hopper decode forced (paired) and forced unpaired; memcheck/synccheck of
# the paired kernel; A/B unpaired vs paired (one binary); the decode bench with defaults.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; DEPS_SRC=$ROOT/.gpu-deps; BUILD=$ROOT/build-gpu
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/machine.txt 2>&1
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
echo "== default rule"; timeout 120 $G --gtest_filter="$D:SplitCombineGpu.*:DecodePlannerGpu.*:KernelRegistry.*" 2>&1 | summ
timeout 60 $C --gtest_filter='Cases/Golden*_cuda:DecodeLaunchPolicy.*' 2>&1 | summ 4
echo "== SMLA_DECODE_SM90A=1 (paired at two head groups)"; t0=$(date +%s); SMLA_DECODE_SM90A=1 timeout 90 $G --gtest_filter="$D" 2>&1 | summ; echo "rc ${PIPESTATUS[0]} $(( $(date +%s) - t0 )) s"
} > $OUT/tests.log 2>&1; cat $OUT/tests.log
PAIRED_OK=0; grep -A3 "SM90A=1 (paired" $OUT/tests.log | grep -q "PASSED" && ! grep -A6 "SM90A=1 (paired" $OUT/tests.log | grep -q "FAILED" && PAIRED_OK=1
{
echo "== SMLA_DECODE_SM90A=1 SMLA_DECODE_PAIR_HEAD_GROUPS=0"; SMLA_DECODE_SM90A=1 SMLA_DECODE_PAIR_HEAD_GROUPS=0 timeout 90 $G --gtest_filter="$D" 2>&1 | summ
SMLA_DECODE_SM90A=1 timeout 60 $C --gtest_filter='Cases/Golden*_cuda' 2>&1 | summ 4
if [[ $PAIRED_OK == 1 ]]; then
  SMLA_DECODE_SM90A=1 timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck $G --gtest_filter='Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.LongListsSplit/v32_fp8:Formats/PortableDecode.HeadCounts*/v32_fp8' 2>&1 | tail -3
  SMLA_DECODE_SM90A=1 timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool synccheck $G --gtest_filter='Formats/PortableDecode.ExtraCacheAndPages/v4_fp8' 2>&1 | tail -2
fi
} > $OUT/tests2.log 2>&1; cat $OUT/tests2.log
if [[ $PAIRED_OK == 1 ]]; then
  SMLA_AB_ENV=SMLA_DECODE_SM90A=1 SMLA_AB_A_ENV=SMLA_DECODE_PAIR_HEAD_GROUPS=0 SMLA_AB_A_BIN=$BUILD/sparse-mla timeout 200 bash scripts/gpu_ab.sh $OUT/ab none --suite v32,v4 --filter decode 2>&1 | tail -16
fi
timeout 80 $BUILD/sparse-mla bench --backend cuda --suite v32,v4 --filter decode --iters 20 --json $OUT/bench_default.json > $OUT/bench_default.log 2>&1; echo "bench rc $?"
python3 -c "
import json
for c in json.load(open('$OUT/bench_default.json'))['cases']: print(c['name'][7:62], c['kernel'], round(c['median_ms']*1e3,1), c.get('verified'), c['plan_reason'][-60:])"
