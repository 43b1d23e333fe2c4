#!/usr/bin/env bash
# Run from the repository root as devrun/call.sh, OUT set; the working tree is 797a240 (the paired
# prefill's forward by cp.async.bulk, thread 0) and devrun/tree_st is e822ab7 (babb2b1: every
# producer thread forwards its own landed chunks with ld.shared + st.async).
# Correctness of both paired producers first (random SPEC §5 prefill cases with the pairing forced,
# then with 3 CTAs walking many items), then every v32 and v4 prefill row round by round:
# A unpaired (797a240's binary), B babb2b1 paired, C 797a240 paired. A side whose check fails runs
# unpaired.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,temperature.gpu --format=csv > $OUT/machine.txt
cat $OUT/machine.txt
ln -sfn "$R/.gpu-deps" devrun/tree_st/.gpu-deps
bash scripts/build_cli.sh "$R" /tmp/bC /tmp/bC.log 8 & pc=$!
bash scripts/build_cli.sh "$R/devrun/tree_st" /tmp/bB /tmp/bB.log 8 & pb=$!
wait $pc || { tail -30 /tmp/bC.log; exit 1; }
wait $pb || { tail -30 /tmp/bB.log; exit 1; }
echo "built at $SECONDS s"
mkdir -p /tmp/ab
check() {  # check SIDE BIN -> prints the env the side runs under
  local side=$1 bin=$2 rc rc3=1
  SMLA_PREFILL_PAIR_HEAD_GROUPS=1 timeout 75 $bin check --backend cuda --op prefill --cases ${PCASES:-200} --seed 20261209 > /tmp/ab/random_$side.log 2>&1
  rc=$?; echo "$side prefill random rc=$rc at $SECONDS s: $(tail -1 /tmp/ab/random_$side.log)" >&2
  if [[ $rc == 0 ]]; then
    SMLA_PREFILL_PAIR_HEAD_GROUPS=1 SMLA_PREFILL_SM90A_CTAS=3 timeout 45 $bin check --backend cuda --op prefill --cases 60 --seed 20261210 > /tmp/ab/random_3ctas_$side.log 2>&1
    rc3=$?; echo "$side prefill random (3 CTAs) rc=$rc3 at $SECONDS s: $(tail -1 /tmp/ab/random_3ctas_$side.log)" >&2
  fi
  [[ $rc3 == 0 ]] && echo "SMLA_PREFILL_PAIR_HEAD_GROUPS=1" || echo "SMLA_PREFILL_PAIR_HEAD_GROUPS=0"
}
C_ENV=$(check c /tmp/bC/sparse-mla)
B_ENV=$(check b /tmp/bB/sparse-mla)
echo "B: $B_ENV  C: $C_ENV"
SMLA_AB_A_BIN=/tmp/bC/sparse-mla SMLA_AB_B_BIN=/tmp/bB/sparse-mla SMLA_AB_C_BIN=/tmp/bC/sparse-mla \
  SMLA_AB_B_ENV="$B_ENV" SMLA_AB_C_ENV="$C_ENV" SMLA_AB_ROUNDS=${ROUNDS:-2} \
  timeout 330 bash scripts/gpu_ab.sh /tmp/ab devrun/st.patch devrun/st.patch --suite v32,v4 --filter prefill 2>&1 | tail -14
echo "ab done at $SECONDS s"
cp /tmp/ab/ab.txt $OUT/ 2>/dev/null
tar czf $OUT/ab.tgz -C /tmp ab
