#!/usr/bin/env bash
# v18 (A, the tree) against v21 (B = A + devrun/v21.patch, i.e. `git show 3fa155d`: v4_fp8's exact e4m3 -> bf16 by byte
# permute instead of cvt.rn.bf16x2.f32), B checked first by its gpu_check (GPU suite incl.
# Fp8DequantGpu, 1000 random cases, sanitizers), then the decode rows A B A B, kernel forced.
set -uo pipefail
cd "$(dirname "$0")/.."
SMLA_COMMIT=8381128+v21 SMLA_CHECK_CASES=1000 SMLA_AB_B_CHECK=1 SMLA_AB_CHECK_BUDGET_S=400 SMLA_AB_ENV=SMLA_DECODE_SM90A=1 \
  bash scripts/gpu_ab.sh /tmp/ab2 devrun/v21.patch --suite v32,v4 --filter decode 2>&1 | tail -40
rc=${PIPESTATUS[0]}
cp /tmp/ab2/ab.txt $OUT/ 2>/dev/null
tar czf $OUT/ab2.tgz -C /tmp ab2
exit $rc
