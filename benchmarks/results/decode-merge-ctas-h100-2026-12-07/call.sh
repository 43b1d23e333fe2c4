#!/usr/bin/env bash
# A: the tree (main 4cded89); B: PROBE_PATCH = `git diff 704d504 cb81c5c -- src tests` (396ed0c's
# in-kernel merge after a grid barrier, launched without the cooperative attribute under
# SMLA_EXP_NO_COOPERATIVE=1); C: MERGE_PATCH = `git show b371139` (merge-only CTAs). Both patch
# files in the repository root; run from there on the device.
PROBE_PATCH=${PROBE_PATCH:-probe.patch}
MERGE_PATCH=${MERGE_PATCH:-merge_ctas.patch}
set -uo pipefail
ROOT=$PWD
R=$OUT/merge2
mkdir -p $R
rm -rf /tmp/t/c; mkdir -p /tmp/t/c
(tar --exclude='./build*' --exclude='./.git' -cf - .) | (cd /tmp/t/c && tar -xf -)
(cd /tmp/t/c && patch -p1 --quiet < $ROOT/$MERGE_PATCH) || echo "merge patch failed"
t0=$(date +%s)
[[ -x /tmp/bld/a/sparse-mla ]] && echo "a kept" || bash scripts/build_cli.sh $ROOT /tmp/bld/a $R/build-a.log 6 &
[[ -x /tmp/bld/b/sparse-mla ]] && echo "b kept" || { (mkdir -p /tmp/t/b; cd /tmp/t/b; (cd $ROOT; tar --exclude='./build*' --exclude='./.git' -cf - .) | tar -xf -; patch -p1 --quiet < $ROOT/$PROBE_PATCH); bash scripts/build_cli.sh /tmp/t/b /tmp/bld/b $R/build-b.log 5; } &
rm -rf /tmp/bld/c; bash scripts/build_cli.sh /tmp/t/c /tmp/bld/c $R/build-c.log 10
wait
echo "builds $(( $(date +%s) - t0 )) s"
ls -la /tmp/bld/*/sparse-mla || { grep -m3 -A5 error $R/build-*.log; exit 1; }
V32="--op decode --format v32_fp8 --h_q 16 --b 1 --s_q 1 --topk 2048 --page_block_size 64 --s_kv 16384"
timeout 120 /tmp/bld/c/sparse-mla bench --backend cuda --verify full --iters 3 $V32 > $R/c-verify-v32.txt 2>&1; echo "verify v32 rc $?"
timeout 120 /tmp/bld/c/sparse-mla bench --backend cuda --verify full --iters 3 --suite tp-shards --filter "b=1 " > $R/c-verify-tp.txt 2>&1; echo "verify tp rc $?"
SMLA_DECODE_MERGE_IN_KERNEL=1 timeout 120 /tmp/bld/c/sparse-mla bench --backend cuda --verify full --iters 3 --suite tp-shards --filter "b=12 " > $R/c-verify-tp-b12-forced.txt 2>&1; echo "verify tp b12 forced rc $?"
for f in $R/c-verify-*.txt; do grep -E "^decode" $f | awk '{print $1,$2,$3,$4,$5,$6,$NF}'; done
export SMLA_AB_A_BIN=/tmp/bld/a/sparse-mla SMLA_AB_B_BIN=/tmp/bld/b/sparse-mla SMLA_AB_C_BIN=/tmp/bld/c/sparse-mla
export SMLA_AB_B_ENV=SMLA_EXP_NO_COOPERATIVE=1 SMLA_AB_ROUNDS=3
timeout 150 bash scripts/gpu_ab.sh $R/v32-h16-b1 $PROBE_PATCH $MERGE_PATCH $V32 | tail -3
timeout 200 bash scripts/gpu_ab.sh $R/tp-b1 $PROBE_PATCH $MERGE_PATCH --suite tp-shards --filter "b=1 "
echo "total $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf merge2.tgz merge2 && rm -rf merge2
