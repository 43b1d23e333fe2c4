#!/usr/bin/env bash
# v8 (the tree): decode suite + sanitizers (decode_check), then A/B: A = v8's CLI, B = v7 (reverse patch).
set -uo pipefail
cd "$(dirname "$0")/.."
SAN=1 bash devrun/decode_check.sh; echo "decode_check rc $?"
SMLA_AB_ENV=SMLA_DECODE_SM90A=1 SMLA_AB_A_BIN=build-gpu/sparse-mla bash scripts/gpu_ab.sh $OUT/ab devrun/v7.patch --suite v32,v4 --filter decode 2>&1 | tail -20
