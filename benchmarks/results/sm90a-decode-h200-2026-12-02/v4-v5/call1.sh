#!/usr/bin/env bash
# Tree (prefetch + v4 bit placement): build, decode tests (sm90a on), bench both; then the
# prefetch-only tree's CLI, bench sm90a on, v4 only.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv > $OUT/machine.txt 2>&1
BENCH=1 bash devrun/decode_check.sh; echo "decode_check rc $?"
B=/tmp/btree; rm -rf $B; mkdir -p $B; tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -xf - -C $B
( cd $B && patch -p1 -s < devrun/to_prefetch_only.patch && echo patched ) || exit 1
t0=$(date +%s)
cmake -S $B -B $B/build-cli -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "-DCMAKE_PREFIX_PATH=$PWD/.gpu-deps" > $OUT/b_build.log 2>&1 && cmake --build $B/build-cli -j 16 --target sparse-mla >> $OUT/b_build.log 2>&1 || { echo B BUILD FAILED; tail -30 $OUT/b_build.log; exit 1; }
echo "b build $(( $(date +%s) - t0 )) s"
SMLA_DECODE_SM90A=1 timeout 70 $B/build-cli/sparse-mla bench --backend cuda --suite v4 --filter decode --iters 20 --json $OUT/bench_prefetch_only.json > $OUT/bench_prefetch_only.log 2>&1; echo "bench prefetch-only rc $?"
SMLA_DECODE_SM90A=1 timeout 70 build-gpu/sparse-mla bench --backend cuda --suite v4 --filter decode --iters 20 --json $OUT/bench_sm90a1_again.json > $OUT/bench_sm90a1_again.log 2>&1; echo "bench again rc $?"
