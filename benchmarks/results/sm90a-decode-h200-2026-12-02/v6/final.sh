#!/usr/bin/env bash
# Final tree: decode_check (build, decode suite with SMLA_DECODE_SM90A=1, sanitizers, bench both
# settings), then the whole GPU ctest label.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/machine.txt 2>&1
SAN=1 BENCH=1 bash devrun/decode_check.sh; echo "decode_check rc $?"
t0=$(date +%s)
( cd build-gpu && timeout 250 ctest -L gpu --output-on-failure -j 1 > $OUT/ctest_gpu.log 2>&1; echo "ctest gpu rc $? $(( $(date +%s) - t0 )) s" )
tail -15 $OUT/ctest_gpu.log
