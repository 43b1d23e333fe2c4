#!/usr/bin/env bash
# v7 tree: build all; golden CUDA cases, odd part count and combine slicings with the Hopper decode
# forced on; then a batch sweep of decode cases with SMLA_DECODE_SM90A=1 and =0.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; DEPS_SRC=$ROOT/.gpu-deps; BUILD=$ROOT/build-gpu
t0=$(date +%s)
{
cmake -S "$DEPS_SRC/googletest" -B "$BUILD/_deps/gtest" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON -DCMAKE_INSTALL_PREFIX="$BUILD/_deps/install" && cmake --build "$BUILD/_deps/gtest" -j 16 && cmake --install "$BUILD/_deps/gtest" &&
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "-DCMAKE_PREFIX_PATH=$BUILD/_deps/install;$DEPS_SRC" && cmake --build $BUILD -j 16
} > $OUT/build.log 2>&1 || { echo BUILD FAILED; grep -B2 -A10 "error" $OUT/build.log | head -60; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
G=$(find $BUILD -name sparse_mla_gpu_tests -type f | head -1); C=$(find $BUILD -name sparse_mla_cpu_tests -type f | head -1)
{
SMLA_DECODE_SM90A=1 timeout 100 $G --gtest_filter="Formats/PortableDecode.*:DecodeGraphGpu.*:-*TwoGigabytes*" 2>&1 | tail -3
SMLA_DECODE_SM90A=1 timeout 120 $C --gtest_filter='Cases/Golden*_cuda' 2>&1 | tail -3
SMLA_DECODE_SM90A=1 SMLA_DECODE_NUM_PARTS=7 timeout 120 $G --gtest_filter='Formats/PortableDecode.*:DecodeGraphGpu.*:-*TwoGigabytes*' 2>&1 | tail -3
for s in 1 4; do SMLA_DECODE_SM90A=1 SMLA_COMBINE_COLUMN_SLICES=$s timeout 60 $G --gtest_filter='SplitCombineGpu.*:DecodeGraphGpu.*' 2>&1 | tail -2; done
} > $OUT/tests.log 2>&1; cat $OUT/tests.log
B=$BUILD/sparse-mla
V4="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384"
V4P="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 1024 --extra_page_block_size 64 --extra_s_kv 16384"
V32="--format v32_fp8 --topk 2048 --page_block_size 64 --s_kv 16384"
for c in "$V4 --h_q 64 --b 1 --s_q 1" "$V4 --h_q 64 --b 4 --s_q 2" "$V4 --h_q 64 --b 8 --s_q 2" "$V4 --h_q 64 --b 16 --s_q 2" "$V4 --h_q 64 --b 32 --s_q 2" "$V4 --h_q 64 --b 64 --s_q 1" \
         "$V4P --h_q 128 --b 8 --s_q 2" "$V4P --h_q 128 --b 16 --s_q 2" "$V4P --h_q 128 --b 1 --s_q 1" \
         "$V32 --h_q 128 --b 1 --s_q 1" "$V32 --h_q 128 --b 8 --s_q 2" "$V32 --h_q 128 --b 16 --s_q 2" "$V32 --h_q 128 --b 32 --s_q 1" \
         "$V4 --h_q 32 --b 64 --s_q 2" "$V4 --h_q 96 --b 64 --s_q 2" "$V32 --h_q 64 --b 64 --s_q 2"; do
  for k in 1 0; do
    r=$(SMLA_DECODE_SM90A=$k timeout 30 $B bench --op decode $c --backend cuda --seed 1 --iters 20 2>&1 | grep -E "^\[1/1\]" | sed 's/.*\.\.\. //')
    echo "sm90a=$k | $c | $r"
  done
done | tee $OUT/sweep.txt | sed 's/--format //; s/--page_block_size/p/; s/--extra_page_block_size/ep/; s/--s_kv 16384//g; s/--extra_s_kv 16384//'
SMLA_AB_ENV=SMLA_DECODE_SM90A=1 SMLA_AB_A_BIN=build-gpu/sparse-mla bash scripts/gpu_ab.sh $OUT/ab devrun/v9_to_v7.patch --suite v32,v4 --filter decode 2>&1 | tail -16
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for k in 1 0; do SMLA_DECODE_SM90A=$k timeout 60 $NCU --clock-control none -k 'regex:sm90a|combine|planner|portable' --section SpeedOfLight $B bench --op decode $V4 --h_q 64 --b 64 --s_q 2 --backend cuda --iters 2 --warmup 0 --verify off 2>&1 | grep -E "^  [a-z_].*\(|Duration" > $OUT/kernels_sm90a$k.txt; echo "== sm90a=$k"; cat $OUT/kernels_sm90a$k.txt | head -12; done
