#!/usr/bin/env bash
# Run from the repository root at a19645e with devrun/v15.patch = git diff HEAD~1 HEAD -- src.
# A = v14 (the tree with devrun/v15.patch reversed), B = v15, B built with tests and checked
# (scripts/gpu_check.sh: GPU tests, random cases, memcheck / racecheck / synccheck) with the Hopper
# decode forced wherever it runs; then the decode bench A B A B.
set -uo pipefail
patch -R -p1 -s < devrun/v15.patch || { echo REVERSE FAILED; exit 1; }
t0=$(date +%s)
SMLA_AB_B_CHECK=1 SMLA_AB_ENV=SMLA_DECODE_SM90A=1 bash scripts/gpu_ab.sh /tmp/ab devrun/v15.patch --suite v32,v4 --filter decode
echo "ab $(( $(date +%s) - t0 )) s"
cat /tmp/ab/b-check/summary.txt | tail -12
grep -E "tests passed|Failed|\*\*\*Failed" /tmp/ab/b-check/gpu_tests.log | head
cp /tmp/ab/*.json /tmp/ab/ab.txt /tmp/ab/b-check/summary.txt /tmp/ab/b-check/sanitizer.log /tmp/ab/b-check/gpu_tests.log $OUT/ 2>/dev/null
