#!/usr/bin/env bash
# Run from the repository root at a19645e with devrun/v15.patch = git diff HEAD~1 HEAD -- src.
# A = v14 (the tree with devrun/v15.patch reversed), B = v15: the decode bench A B A B (CLI builds).
set -uo pipefail
patch -R -p1 -s < devrun/v15.patch || { echo REVERSE FAILED; exit 1; }
SMLA_AB_ENV=SMLA_DECODE_SM90A=1 bash scripts/gpu_ab.sh /tmp/ab devrun/v15.patch --suite v32,v4 --filter decode | tail -16
cp /tmp/ab/*.json /tmp/ab/ab.txt $OUT/
