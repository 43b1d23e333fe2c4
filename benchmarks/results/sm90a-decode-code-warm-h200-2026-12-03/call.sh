#!/usr/bin/env bash
# Code-warm experiment (5c53c78, reverted in 523d834; run from the repository root at 5c53c78): per case, the timed launch's kernel time with SMLA_EXP_WARM none / grid1 / full.
set -uo pipefail
ROOT=$PWD; BUILD=$ROOT/build-gpu
t0=$(date +%s)
bash scripts/build_cli.sh . $BUILD $OUT/build.log || { echo BUILD FAILED; grep -B2 -A10 error $OUT/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=$BUILD/sparse-mla
V4="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384 --h_q 64 --s_q 2"
V32="--format v32_fp8 --topk 2048 --page_block_size 64 --s_kv 16384 --h_q 128 --s_q 2"
SW="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_page_block_size 64 --extra_s_kv 65536 --h_q 64 --b 132 --s_q 1"
med() { grep "^EXPK" | awk '{print $3}' | tail -n 20 | sort -g | awk '{a[NR]=$1} END{printf "%s (min %s max %s, n %d)", a[int((NR+1)/2)], a[1], a[NR], NR}'; }
run() {  # label env... -- args
  for w in none grid1 full; do
    r=$(env "${@:2}" SMLA_DECODE_SM90A=1 SMLA_EXP_WARM=$w timeout 60 $B bench --op decode ${CASE} --backend cuda --seed 1 --iters 20 --verify off 2>&1 | med)
    echo "$1 $w: $r"
  done
}
CASE="$V4 --b 64" run "V4h64b64" X=1
CASE="$V4 --b 2" run "V4h64b2" X=1
CASE="$V32 --b 64" run "V32b64" X=1
for e in 128 896 1920; do CASE="$SW --extra_topk $e" run "sweep e$e" SMLA_DECODE_NUM_PARTS=132; done
echo "total $(( $(date +%s) - t0 )) s"
