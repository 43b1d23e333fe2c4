#!/usr/bin/env bash
# Run from the repository root as devrun/call.sh on the tree of 158f37c, OUT set.
# The paired Hopper decode and prefill (2-CTA clusters whose producers gather, and for FP8 convert,
# half of each block for both CTAs) against the unpaired ones, one binary: correctness first
# (random SPEC §5 decode and prefill cases and the verified decode rows with the pairing forced;
# a pairing whose random cases time out is left out of B), then every v32 and v4 row, prefill and
# decode, round by round (A unpaired, B paired, the Hopper decode forced on both), then three bf16
# decode rows unpaired and paired.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD
export SMLA_COMMIT=${SMLA_COMMIT:-unknown}  # the tree of the commit this folder names
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,temperature.gpu --format=csv > $OUT/machine.txt
bash scripts/build_cli.sh "$R" /tmp/bB /tmp/bB.log 16 || { tail -30 /tmp/bB.log; exit 1; }
grep -E "spill" /tmp/bB.log | grep -i sm90a_sparse_decode | head; echo "built at $SECONDS s"
mkdir -p /tmp/ab
export SMLA_DECODE_SM90A=1
SMLA_DECODE_PAIR_HEAD_GROUPS=1 timeout 100 /tmp/bB/sparse-mla check --backend cuda --op decode --cases ${CASES:-600} --seed 20261207 > /tmp/ab/random_check_paired.log 2>&1
rc=$?; echo "random rc=$rc at $SECONDS s"; tail -3 /tmp/ab/random_check_paired.log
B_ENV="SMLA_DECODE_PAIR_HEAD_GROUPS=1"; [[ $rc == 124 ]] && B_ENV=""
[[ -n $B_ENV ]] && SMLA_DECODE_PAIR_HEAD_GROUPS=1 timeout 60 /tmp/bB/sparse-mla bench --backend cuda --verify subset --iters 3 --suite v32,v4 --filter decode --json /tmp/ab/verify_paired.json > /tmp/ab/verify_paired.log 2>&1
echo "verify rc=$? at $SECONDS s"; tail -4 /tmp/ab/verify_paired.log
unset SMLA_DECODE_SM90A
SMLA_PREFILL_PAIR_HEAD_GROUPS=1 timeout 60 /tmp/bB/sparse-mla check --backend cuda --op prefill --cases ${PCASES:-300} --seed 20261207 > /tmp/ab/random_check_prefill_paired.log 2>&1
rc=$?; echo "prefill random rc=$rc at $SECONDS s"; tail -2 /tmp/ab/random_check_prefill_paired.log
[[ $rc != 124 ]] && B_ENV="$B_ENV SMLA_PREFILL_PAIR_HEAD_GROUPS=1" && SMLA_PREFILL_PAIR_HEAD_GROUPS=1 SMLA_PREFILL_SM90A_CTAS=3 timeout 40 /tmp/bB/sparse-mla check --backend cuda --op prefill --cases 100 --seed 20261208 > /tmp/ab/random_check_prefill_paired_3ctas.log 2>&1
echo "prefill random (3 CTAs) rc=$? at $SECONDS s"; tail -2 /tmp/ab/random_check_prefill_paired_3ctas.log
export SMLA_DECODE_SM90A=1
SMLA_AB_A_BIN=/tmp/bB/sparse-mla SMLA_AB_B_BIN=/tmp/bB/sparse-mla SMLA_AB_B_ENV="$B_ENV" SMLA_AB_ROUNDS=${ROUNDS:-2} \
  timeout 300 bash scripts/gpu_ab.sh /tmp/ab none --suite v32,v4 ${BENCH_FLAGS:-} 2>&1 | tail -20
echo "ab done at $SECONDS s"
BF=(
"--d_qk 576 --h_q 128 --b 64 --s_q 2 --topk 2048 --page_block_size 64 --s_kv 4096"
"--d_qk 576 --h_q 128 --b 128 --s_q 2 --topk 2048 --page_block_size 64 --s_kv 4096"
"--d_qk 512 --h_q 128 --b 128 --s_q 2 --topk 128 --page_block_size 256 --extra_topk 1024 --extra_page_block_size 64 --s_kv 4096"
)
mkdir -p /tmp/ab/bf16
[[ $B_ENV == *DECODE* ]] && for round in 1 2; do for i in "${!BF[@]}"; do for pair in 0 1; do
  SMLA_DECODE_PAIR_HEAD_GROUPS=$pair timeout 60 /tmp/bB/sparse-mla bench --backend cuda --op decode --format bf16 ${BF[$i]} --iters 20 --json /tmp/ab/bf16/p$pair-$round-$i.json > /tmp/ab/bf16/p$pair-$round-$i.log 2>&1 || echo "bf16 row $i pair $pair rc=$?"
  echo "bf16 row $i pair $pair round $round: $(grep -m1 '^\[' /tmp/ab/bf16/p$pair-$round-$i.log)"
done; done; done
echo "bf16 done at $SECONDS s"
cp /tmp/ab/ab.txt $OUT/ 2>/dev/null
tar czf $OUT/ab.tgz -C /tmp ab
