#!/usr/bin/env bash
# v18 (A = 55205b3) against v22 (B: 16-B bf16 stores, 18e1567) and v22+v23 (C: the producer's
# row loop not unrolled, HEAD): the decode rows of v32 and v4 round by round (A B C A B C), the
# kernel forced; then C's 800 random SPEC §5 cases and its verified decode rows. Run from the
# repository root as devrun/call.sh on 0425f10 (v22 + v23) with devrun/v22.patch =
# `git diff 55205b3 18e1567 -- src` and devrun/v22v23.patch = `git diff 55205b3 0425f10 -- src`
# (untracked, carried), devrun/commit the SMLA_COMMIT label.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD
export SMLA_COMMIT=$(cat devrun/commit)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,temperature.gpu --format=csv > $OUT/machine.txt
# C from the tree as it is (HEAD), in the background while A's tree is made.
mkdir -p /tmp/bC
bash scripts/build_cli.sh "$R" /tmp/bC /tmp/bC.log 8 & cpid=$!
mkdir -p /tmp/treeA
tar --exclude='./build*' --exclude='./.git' -cf - . | (cd /tmp/treeA && tar -xf -)
(cd /tmp/treeA && patch -R -p1 --quiet < "$R/devrun/v22v23.patch") || { echo "reverse patch failed"; exit 1; }
wait $cpid || { tail -30 /tmp/bC.log; exit 1; }
SMLA_AB_C_BIN=/tmp/bC/sparse-mla SMLA_AB_ENV=SMLA_DECODE_SM90A=1 SMLA_AB_ROUNDS=2 \
  bash /tmp/treeA/scripts/gpu_ab.sh /tmp/ab "$R/devrun/v22.patch" "$R/devrun/v22v23.patch" \
  --suite v32,v4 --filter decode 2>&1 | tail -40
rc=${PIPESTATUS[0]}
cp /tmp/ab/ab.txt $OUT/ 2>/dev/null
SMLA_DECODE_SM90A=1 timeout 150 /tmp/bC/sparse-mla check --backend cuda --cases 800 --seed 20261207 > /tmp/ab/random_check_c.log 2>&1
echo "random rc=$?"; tail -3 /tmp/ab/random_check_c.log
SMLA_DECODE_SM90A=1 timeout 120 /tmp/bC/sparse-mla bench --backend cuda --verify subset --iters 3 --suite v32,v4,tp-shards --filter decode --json /tmp/ab/verify_c.json > /tmp/ab/verify_c.log 2>&1
echo "verify rc=$?"; tail -5 /tmp/ab/verify_c.log
tar czf $OUT/ab.tgz -C /tmp ab
exit $rc
