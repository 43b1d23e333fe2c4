#!/usr/bin/env bash
# Build (as decode_check) and run GPU ctest tests 123..138 (the steered runs the final call's
# 250-s budget did not reach).
set -uo pipefail
cd "$(dirname "$0")/.."
FILTER='Formats/PortableDecode.ExtraCacheAndPages/*' bash devrun/decode_check.sh; echo "build+smoke rc $?"
t0=$(date +%s)
( cd build-gpu && timeout 420 ctest -L gpu -I 123,138 --output-on-failure > $OUT/ctest_rest.log 2>&1; echo "ctest rest rc $? $(( $(date +%s) - t0 )) s" )
grep -E "tests passed|tests failed|Failed|Passed" $OUT/ctest_rest.log | tail -25
