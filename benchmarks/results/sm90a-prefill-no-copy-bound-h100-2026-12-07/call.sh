#!/usr/bin/env bash
# Run from the repository root as devrun/call.sh, OUT set, on the tree of f5705ba (code = 3fb887e),
# with devrun/nocopy.patch holding the edit the README describes (the patch itself is not kept).
# A bound, not a kernel: B is the Hopper prefill with its producer's KV copies removed (the
# half-stages' barriers, index loads and validity flags kept; the tiles hold stale bytes), so B's
# time is the consumers' seesaw plus the ring's hand-offs without any gather. v32 and v4 prefill
# rows, scripts/gpu_ab.sh, L2 flushed, two rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,temperature.gpu --format=csv | tee $OUT/machine.txt
SMLA_AB_ROUNDS=2 timeout 240 bash scripts/gpu_ab.sh /tmp/ab devrun/nocopy.patch --suite v32,v4 --filter prefill 2>&1 | tail -12
cp /tmp/ab/ab.txt /tmp/ab/*.json $OUT/ 2>/dev/null
echo "done at $SECONDS s"
