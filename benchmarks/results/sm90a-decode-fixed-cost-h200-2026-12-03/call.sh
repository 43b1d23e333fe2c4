#!/usr/bin/env bash
# Issue 21 max_logits race: build all with the fix, prefill tests (3 CTAs, memcheck); then the
# tree without the fix (reverse devrun/fix.patch): the new test must fail. Then a decode
# fixed-cost sweep (one query per CTA, pairs 2..32).
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
MC="/usr/local/cuda/bin/compute-sanitizer --tool memcheck"
summ() { grep -E "^\[  (FAILED|PASSED) |tests ran|Failure|max_logits|rror" | head -${1:-12}; }
run_prefill() {
  echo "== 3 CTAs, EmptyLists x10"; SMLA_PREFILL_SM90A_CTAS=3 timeout 60 $G --gtest_filter='DQk/PortablePrefill.EmptyListsBetweenFullOnes/*' --gtest_repeat=10 2>&1 | summ 8
  echo "== 1 CTA, EmptyLists x10"; SMLA_PREFILL_SM90A_CTAS=1 timeout 60 $G --gtest_filter='DQk/PortablePrefill.EmptyListsBetweenFullOnes/*' --gtest_repeat=10 2>&1 | summ 8
  echo "== memcheck 3 CTAs"; t1=$(date +%s); SMLA_PREFILL_SM90A_CTAS=3 timeout 150 $MC $G --gtest_filter='DQk/PortablePrefill.EmptyListsBetweenFullOnes/*:DQk/PortablePrefill.TopkAndFeatures/*' 2>&1 | summ 12; echo "$(( $(date +%s) - t1 )) s"
}
{
echo "##### with the fix"
run_prefill
echo "== prefill suite default, 3 CTAs, golden"
timeout 120 $G --gtest_filter='DQk/PortablePrefill.*:-*TwoGigabytes*' 2>&1 | summ 4
SMLA_PREFILL_SM90A_CTAS=3 timeout 120 $G --gtest_filter='DQk/PortablePrefill.*:-*TwoGigabytes*:*SeventyThousand*' 2>&1 | summ 4
timeout 60 $C --gtest_filter='Cases/Golden*_cuda' 2>&1 | summ 4
} > $OUT/fix.log 2>&1; cat $OUT/fix.log
git apply -R devrun/fix.patch && cmake --build $BUILD -j 16 --target sparse_mla_gpu_tests > $OUT/build_nofix.log 2>&1 || { echo NOFIX BUILD FAILED; tail -20 $OUT/build_nofix.log; }
{ echo "##### without the fix"; run_prefill; } > $OUT/nofix.log 2>&1; cat $OUT/nofix.log
git apply devrun/fix.patch
B=$BUILD/sparse-mla
{
for e in 128 384 896 1920 3968; do for k in 1 0; do
  c="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk $e --extra_page_block_size 64 --extra_s_kv 65536 --h_q 64 --b 132 --s_q 1"
  r=$(SMLA_DECODE_NUM_PARTS=132 SMLA_DECODE_SM90A=$k timeout 30 $B bench --op decode $c --backend cuda --seed 1 --iters 20 2>&1 | grep -E "^\[1/1\]" | sed 's/.*\.\.\. //')
  echo "sm90a=$k parts=132 extra_topk $e | $r"
done; done
for e in 384 1920; do
  c="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk $e --extra_page_block_size 64 --extra_s_kv 65536 --h_q 64 --b 264 --s_q 1"
  r=$(SMLA_DECODE_NUM_PARTS=132 SMLA_DECODE_SM90A=1 timeout 30 $B bench --op decode $c --backend cuda --seed 1 --iters 20 2>&1 | grep -E "^\[1/1\]" | sed 's/.*\.\.\. //')
  echo "sm90a=1 parts=132 b=264 extra_topk $e | $r"
done
V4="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384 --h_q 64 --b 64 --s_q 2"
for n in default 64 128 256; do
  env=(SMLA_DECODE_SM90A=1); [[ $n != default ]] && env+=(SMLA_DECODE_NUM_PARTS=$n)
  r=$(env "${env[@]}" timeout 30 $B bench --op decode $V4 --backend cuda --seed 1 --iters 20 2>&1 | grep -E "^\[1/1\]" | sed 's/.*\.\.\. //')
  echo "V4 h64 b64 s_q2 parts=$n | $r"
done
} > $OUT/fixed_cost.txt 2>&1; cat $OUT/fixed_cost.txt
