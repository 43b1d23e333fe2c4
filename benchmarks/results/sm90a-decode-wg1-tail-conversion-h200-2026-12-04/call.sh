#!/usr/bin/env bash
# v24 (B = HEAD, WG1 converts its next K1 right behind its last products) against A (HEAD with
# devrun/v24.patch reversed): the decode rows of v32 and v4 round by round (A B A B), the kernel
# forced; then B's random SPEC §5 cases and its verified decode rows.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD
export SMLA_COMMIT=$(cat devrun/commit)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,temperature.gpu --format=csv > $OUT/machine.txt
mkdir -p /tmp/bB
bash scripts/build_cli.sh "$R" /tmp/bB /tmp/bB.log 8 & bpid=$!
mkdir -p /tmp/treeA
tar --exclude='./build*' --exclude='./.git' -cf - . | (cd /tmp/treeA && tar -xf -)
(cd /tmp/treeA && patch -R -p1 --quiet < "$R/devrun/v24.patch") || { echo "reverse patch failed"; exit 1; }
wait $bpid || { tail -30 /tmp/bB.log; exit 1; }
echo "B built at $SECONDS s"
SMLA_AB_B_BIN=/tmp/bB/sparse-mla SMLA_AB_ENV=SMLA_DECODE_SM90A=1 SMLA_AB_ROUNDS=2 \
  bash /tmp/treeA/scripts/gpu_ab.sh /tmp/ab "$R/devrun/v24.patch" \
  --suite v32,v4 --filter decode 2>&1 | tail -30
rc=${PIPESTATUS[0]}
echo "ab done at $SECONDS s"
cp /tmp/ab/ab.txt $OUT/ 2>/dev/null
SMLA_DECODE_SM90A=1 timeout 120 /tmp/bB/sparse-mla check --backend cuda --op decode --cases 700 --seed 20261208 > /tmp/ab/random_check_b.log 2>&1
echo "random rc=$?"; tail -3 /tmp/ab/random_check_b.log
SMLA_DECODE_SM90A=1 timeout 100 /tmp/bB/sparse-mla bench --backend cuda --verify subset --iters 3 --suite v32,v4,tp-shards --filter decode --json /tmp/ab/verify_b.json > /tmp/ab/verify_b.log 2>&1
echo "verify rc=$?"; tail -4 /tmp/ab/verify_b.log
tar czf $OUT/ab.tgz -C /tmp ab
exit $rc
