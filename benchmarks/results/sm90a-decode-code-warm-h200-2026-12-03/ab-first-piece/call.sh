#!/usr/bin/env bash
# A (523d834) / B (9119cb4: Q first + launch_dependents) / C (HEAD: + conversion in two turns):
# C built with tests and checked (GPU tests, memcheck + synccheck on decode with the Hopper kernel
# forced), then the decode bench alternating A, B, C twice. Run from the repository root at 61da041 (C)
# with devrun/to_a.patch = git diff HEAD 523d834 -- src and devrun/to_b.patch = git diff HEAD 9119cb4 -- src.
# Only eight files come back from a device call: C's bench files did not (the call printed no table).
set -uo pipefail
ROOT=$PWD; t0=$(date +%s)
for v in a b; do rm -rf /tmp/t$v; mkdir /tmp/t$v; tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -xf - -C /tmp/t$v; (cd /tmp/t$v && patch -p1 -s < devrun/to_$v.patch) || { echo PATCH $v FAILED; exit 1; }; done
cli() { bash scripts/build_cli.sh $1 $2 $OUT/build_$3.log 4; }
cli /tmp/ta /tmp/ba a & pa=$!
cli /tmp/tb /tmp/bb b & pb=$!
cmake -S . -B /tmp/bc -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "-DCMAKE_PREFIX_PATH=$ROOT/.gpu-deps" >/dev/null && cmake --build /tmp/bc -j 8 > $OUT/build_c.log 2>&1 || { echo BUILD C FAILED; grep -B2 -A10 error $OUT/build_c.log | head -30; exit 1; }
wait $pa || { echo BUILD A FAILED; exit 1; }; wait $pb || { echo BUILD B FAILED; exit 1; }
echo "builds $(( $(date +%s) - t0 )) s"
timeout 200 ctest --test-dir /tmp/bc -L gpu --output-on-failure -j 8 --timeout 200 > $OUT/gpu_tests.log 2>&1; echo "ctest rc $?: $(grep -E 'tests passed' $OUT/gpu_tests.log)"; grep -E "Failed|\*\*\*" $OUT/gpu_tests.log | head
F='Formats/PortableDecode.LongListsSplit/v32_fp8:Formats/PortableDecode.ExtraCacheAndPages/v4_fp8:Formats/PortableDecode.ManyRequests/v32_fp8:DecodeGraphGpu.*:SplitCombineGpu.*'
for tool in memcheck synccheck; do SMLA_DECODE_SM90A=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 /tmp/bc/tests/cpp/sparse_mla_gpu_tests --gtest_filter="$F" > $OUT/san_$tool.log 2>&1; echo "$tool rc $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/san_$tool.log | tail -3 | tr '\n' ' ')"; done
echo "checks $(( $(date +%s) - t0 )) s"
for round in 1 2; do for v in a b c; do
  SMLA_DECODE_SM90A=1 timeout 120 /tmp/b$v/sparse-mla bench --backend cuda --verify off --iters 20 --suite v32,v4 --filter decode --json $OUT/$v-$round.json > $OUT/$v-$round.txt 2>&1 || echo "bench $v $round rc $?"
done; done
echo "total $(( $(date +%s) - t0 )) s"
