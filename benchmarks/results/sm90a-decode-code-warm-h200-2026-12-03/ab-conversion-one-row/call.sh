#!/usr/bin/env bash
# Run from the repository root at 3845f6b with devrun/v14.patch = git diff 3845f6b~1 3845f6b -- src.
# A = v13 (the tree with devrun/v14.patch reversed), B = v14; decode bench A B A B.
set -uo pipefail
patch -R -p1 -s < devrun/v14.patch || { echo REVERSE FAILED; exit 1; }
t0=$(date +%s)
SMLA_AB_ENV=SMLA_DECODE_SM90A=1 bash scripts/gpu_ab.sh /tmp/ab devrun/v14.patch --suite v32,v4 --filter decode
echo "ab $(( $(date +%s) - t0 )) s"
cp /tmp/ab/*.json /tmp/ab/ab.txt $OUT/
