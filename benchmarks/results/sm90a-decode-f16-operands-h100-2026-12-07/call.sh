#!/usr/bin/env bash
# The call of this folder (run from the repository root on the device, `TOTAL=540 bash call.sh`):
# tree = a8eb498 (A); B = A + devrun/f16.patch = `git show 6eac13f` (the f16 operands). CLI builds
# of A and B at once, then B's random SPEC §5 cases with the Hopper decode forced, B's V4 b 64 rows
# verified in full, and the A/B of the decode rows. TOTAL: seconds this call may take.
set -uo pipefail
TOTAL=${TOTAL:-540}
ROOT=$PWD
R=$OUT/f16q
mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $R/gpu.txt
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) - ${1:-0} )); }
rm -rf /tmp/t/b; mkdir -p /tmp/t/b
(tar --exclude='./build*' --exclude='./.git' -cf - .) | (cd /tmp/t/b && tar -xf -)
(cd /tmp/t/b && patch -p1 --quiet < $ROOT/devrun/f16.patch) || { echo "patch failed"; exit 1; }
bash scripts/build_cli.sh $ROOT /tmp/bld/a $R/build-a.log 8 &
bash scripts/build_cli.sh /tmp/t/b /tmp/bld/b $R/build-b.log 8
wait
echo "builds $(( $(date +%s) - t0 )) s"; ls /tmp/bld/*/sparse-mla || { grep -m5 -B2 -A8 error $R/build-*.log; exit 1; }
grep -h "spill" $R/build-b.log | grep -i sm90a_sparse | head -5
B=/tmp/bld/b/sparse-mla
SMLA_DECODE_SM90A=1 timeout 100 $B check --backend cuda --op decode --cases 300 --seed 5100 \
  > $R/b-random-sm90a-forced.log 2>&1
echo "forced random rc $?"; tail -2 $R/b-random-sm90a-forced.log; grep -m5 -i fail $R/b-random-sm90a-forced.log
timeout 100 $B bench --backend cuda --verify full --iters 3 --suite v4 --filter "b=64 " > $R/b-verify-v4-b64.txt 2>&1
echo "verify rc $?"; grep -E "^decode|FAIL|fail" $R/b-verify-v4-b64.txt | head -8
export SMLA_AB_A_BIN=/tmp/bld/a/sparse-mla SMLA_AB_B_BIN=$B SMLA_AB_ROUNDS=2
echo "left for A/B: $(left 15) s"
timeout $(left 15) bash scripts/gpu_ab.sh $R/ab devrun/f16.patch --suite v32,v4 --filter "b=64 " | tail -6
[[ $(left 15) -gt 60 ]] && timeout $(left 15) bash scripts/gpu_ab.sh $R/ab-b128 devrun/f16.patch --suite v4 --filter "b=128 " | tail -4
echo "total $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf f16q.tgz f16q && rm -rf f16q
