#!/usr/bin/env bash
# The Hopper decode on bf16 caches: bf16 decode rows with the portable kernels (A:
# SMLA_DECODE_SM90A=0) and the Hopper decode (B: =1) alternating, two rounds, one binary; then
# draft tokens sharing indices (--shared_indices F) on FP8 and bf16 rows with the default kernels,
# F = 0 / 0.5 / 0.9, two rounds. Run from the repository root as devrun/bf16_call.sh; everything
# lands in $OUT/runs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD
export SMLA_COMMIT=$(cat devrun/commit)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,temperature.gpu --format=csv > $OUT/machine.txt
bash scripts/build_cli.sh "$R" /tmp/b /tmp/b.log 16 || { tail -40 /tmp/b.log; exit 1; }
B=/tmp/b/sparse-mla
ROWS=(
"--d_qk 576 --h_q 128 --b 2 --s_q 2 --topk 2048 --page_block_size 64"
"--d_qk 576 --h_q 128 --b 64 --s_q 2 --topk 2048 --page_block_size 64"
"--d_qk 576 --h_q 128 --b 128 --s_q 2 --topk 2048 --page_block_size 64"
"--d_qk 576 --h_q 128 --b 1 --s_q 2 --topk 2048 --page_block_size 64"
"--d_qk 576 --h_q 64 --b 2 --s_q 2 --topk 2048 --page_block_size 64"
"--d_qk 576 --h_q 128 --b 132 --s_q 1 --topk 8192 --page_block_size 64 --s_kv 8192"
"--d_qk 512 --h_q 64 --b 2 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 64 --b 64 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 64 --b 128 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 64 --b 256 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 64 --b 16 --s_q 1 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 64 --b 12 --s_q 1 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 128 --b 64 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 1024 --extra_page_block_size 64"
"--d_qk 512 --h_q 128 --b 128 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 1024 --extra_page_block_size 64"
"--d_qk 576 --h_q 32 --b 64 --s_q 2 --topk 2048 --page_block_size 64"
"--d_qk 512 --h_q 32 --b 128 --s_q 1 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 32 --b 64 --s_q 1 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 512 --h_q 16 --b 128 --s_q 1 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64"
"--d_qk 576 --h_q 16 --b 64 --s_q 2 --topk 2048 --page_block_size 64"
)
mkdir -p /tmp/runs/ab /tmp/runs/shared; cp $OUT/machine.txt /tmp/runs/
for round in 1 2; do
  for i in "${!ROWS[@]}"; do
    for side in a b; do
      knob=0; [[ $side == b ]] && knob=1
      extra_s_kv="--s_kv 4096"; [[ ${ROWS[$i]} == *"--s_kv"* ]] && extra_s_kv=""
      SMLA_DECODE_SM90A=$knob timeout 60 $B bench --backend cuda --op decode --format bf16 ${ROWS[$i]} $extra_s_kv \
        --iters 20 --json /tmp/runs/ab/$side-$round-$i.json > /tmp/runs/ab/$side-$round-$i.log 2>&1 || echo "row $i side $side rc=$?"
    done
  done
  echo "round $round done at $SECONDS s"
done
python3 devrun/bf16_table.py /tmp/runs/ab > /tmp/runs/ab.txt; cat /tmp/runs/ab.txt
SHARED=(
"--format v32_fp8 --h_q 128 --b 64 --s_q 2 --topk 2048 --page_block_size 64 --s_kv 16384"
"--format v4_fp8 --h_q 64 --b 64 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64 --s_kv 16384"
"--format v4_fp8 --h_q 64 --b 32 --s_q 4 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64 --s_kv 16384"
"--format v4_fp8 --h_q 128 --b 64 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 1024 --extra_page_block_size 64 --s_kv 16384"
"--format bf16 --h_q 128 --b 64 --s_q 2 --topk 2048 --page_block_size 64 --s_kv 4096"
"--format bf16 --d_qk 512 --h_q 64 --b 64 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 512 --extra_page_block_size 64 --s_kv 4096"
)
for round in 1 2; do
  for i in "${!SHARED[@]}"; do
    for f in 0 0.5 0.9; do
      sh=""; [[ $f != 0 ]] && sh="--shared_indices $f"
      timeout 60 $B bench --backend cuda --op decode ${SHARED[$i]} $sh --iters 20 \
        --json /tmp/runs/shared/$round-$i-$f.json > /tmp/runs/shared/$round-$i-$f.log 2>&1 || echo "shared $i $f rc=$?"
    done
  done
  echo "shared round $round done at $SECONDS s"
done
python3 devrun/shared_table.py /tmp/runs/shared > /tmp/runs/shared.txt; cat /tmp/runs/shared.txt
tar czf $OUT/runs.tgz -C /tmp runs
