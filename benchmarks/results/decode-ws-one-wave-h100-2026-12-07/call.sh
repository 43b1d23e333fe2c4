#!/usr/bin/env bash
# Warp-specialised 16-row decode in one wave (SMLA_DECODE_NUM_PARTS=sm_count) on the tp-shards decode rows.
set -uo pipefail
R=$OUT/parts
mkdir -p $R
t0=$(date +%s)
SMS=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null || echo 132)
[[ $SMS =~ ^[0-9]+$ ]] || SMS=132
echo "sms $SMS"
nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
[[ -x /tmp/bld/a/sparse-mla ]] && echo "a kept" || bash scripts/build_cli.sh . /tmp/bld/a $R/build-a.log 16
echo "build $(( $(date +%s) - t0 )) s"
B=/tmp/bld/a/sparse-mla
# which kernel / parts each side's plan takes on the rows that matter
for env in "" "SMLA_DECODE_NUM_PARTS=$SMS" "SMLA_DECODE_NUM_PARTS=$SMS SMLA_DECODE_WARP_SPECIALIZED=0"; do
  echo "== $env" >> $R/plans.txt
  for bb in 64 128; do for h in 8 16; do
    env $env $B list --op decode --format v4_fp8 --h_q $h --b $bb --s_q 1 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64 >> $R/plans.txt 2>&1
  done; done
done
export SMLA_AB_A_BIN=$B SMLA_AB_ROUNDS=2
export SMLA_AB_B_ENV="SMLA_DECODE_NUM_PARTS=$SMS" SMLA_AB_C_ENV="SMLA_DECODE_NUM_PARTS=$SMS SMLA_DECODE_WARP_SPECIALIZED=0"
timeout 420 bash scripts/gpu_ab.sh $R/ab none none --suite tp-shards --filter decode
echo "total $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf parts.tgz parts && rm -rf parts
