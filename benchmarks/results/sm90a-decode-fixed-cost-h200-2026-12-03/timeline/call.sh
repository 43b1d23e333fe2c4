#!/usr/bin/env bash
# Timeline probe of the sm90a decode (experiment commit): CLI only, then a few bench cases; the
# probe prints TL lines for five CTAs of the 10th launch.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; BUILD=$ROOT/build-gpu
t0=$(date +%s)
bash scripts/build_cli.sh . $BUILD $OUT/build.log || { echo BUILD FAILED; grep -B2 -A10 error $OUT/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=$BUILD/sparse-mla
V4="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384 --h_q 64 --s_q 2"
V4P="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 1024 --extra_page_block_size 64 --extra_s_kv 16384 --h_q 128 --s_q 2"
V32="--format v32_fp8 --topk 2048 --page_block_size 64 --s_kv 16384 --h_q 128 --s_q 2"
n=0
for c in "$V4 --b 64" "$V4 --b 2" "$V4 --b 256" "$V32 --b 64" "$V4P --b 64" "--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 128 --extra_page_block_size 64 --extra_s_kv 65536 --h_q 64 --b 132 --s_q 1"; do
  n=$((n+1))
  SMLA_DECODE_SM90A=1 timeout 60 $B bench --op decode $c --backend cuda --seed 1 --iters 20 > $OUT/tl_$n.txt 2>&1
  echo "== $n: $c"; grep -E "^\[1/1\]" $OUT/tl_$n.txt | sed 's/.*\.\.\. //'; grep -c "^TL" $OUT/tl_$n.txt
done
