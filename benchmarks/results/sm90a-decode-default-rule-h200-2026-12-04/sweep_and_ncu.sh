#!/usr/bin/env bash
# The default rule's crossover around its threshold (SMLA_DECODE_SM90A=1 / 0 alternating, two
# runs each, one binary), then ncu of v15 (the Hopper decode forced) on a steady-state row and a
# short row.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; BUILD=$ROOT/build-gpu
bash scripts/build_cli.sh . $BUILD $OUT/build.log 16 || { tail -30 $OUT/build.log; exit 1; }
echo "build $SECONDS s"
B=$BUILD/sparse-mla
V4="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384"
V4P="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 1024 --extra_page_block_size 64 --extra_s_kv 16384"
V32="--format v32_fp8 --topk 2048 --page_block_size 64 --s_kv 16384"
for c in "$V4 --h_q 64 --b 16 --s_q 1" "$V4 --h_q 64 --b 32 --s_q 1" "$V4 --h_q 64 --b 48 --s_q 1" "$V4 --h_q 64 --b 32 --s_q 2" "$V4 --h_q 64 --b 96 --s_q 1" \
         "$V4P --h_q 128 --b 1 --s_q 1" "$V4P --h_q 128 --b 1 --s_q 2" "$V4P --h_q 128 --b 4 --s_q 1" "$V4P --h_q 96 --b 2 --s_q 2" \
         "$V32 --h_q 128 --b 1 --s_q 1" "$V32 --h_q 128 --b 1 --s_q 2" \
         "$V32 --h_q 64 --b 1 --s_q 1" "$V32 --h_q 64 --b 1 --s_q 2" "$V32 --h_q 64 --b 2 --s_q 2" "$V32 --h_q 64 --b 4 --s_q 2" "$V32 --h_q 64 --b 8 --s_q 2"; do
  for k in 1 0 1 0; do
    r=$(SMLA_DECODE_SM90A=$k timeout 30 $B bench --op decode $c --backend cuda --seed 1 --iters 20 2>&1 | grep -E "^\[1/1\]" | sed 's/.*\.\.\. //')
    echo "sm90a=$k | $c | $r"
  done
done > $OUT/sweep.txt
echo "sweep done $SECONDS s"
sed 's/--format //; s/--page_block_size/p/; s/--extra_page_block_size/ep/; s/--s_kv 16384//g; s/--extra_s_kv 16384//; s/--topk 128 p 256 --extra_topk //' $OUT/sweep.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
mkdir -p /tmp/ncu
run() { # name full0 flags...
  local name=$1 full0=$2; shift 2
  SMLA_DECODE_SM90A=1 timeout 150 $NCU -k regex:sm90a_sparse_decode --set full --import-source no --launch-skip 2 --launch-count 1 -f -o $BUILD/$name $B bench "$@" --backend cuda --iters 3 --warmup 0 --verify off > $BUILD/$name.log 2>&1 || { tail -5 $BUILD/$name.log; return; }
  $NCU -i $BUILD/$name.ncu-rep --page details > /tmp/ncu/details_$name.txt 2>&1
  $NCU -i $BUILD/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > /tmp/ncu/source_$name.csv.gz
  echo "== $name" >> /tmp/ncu/summary.txt
  python3 scripts/ncu_waits.py /tmp/ncu/source_$name.csv.gz $full0 >> /tmp/ncu/summary.txt 2>&1
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Executed Ipc A" /tmp/ncu/details_$name.txt | head -12 >> /tmp/ncu/summary.txt
  python3 scripts/ncu_hotspots.py <(gunzip -c /tmp/ncu/source_$name.csv.gz) 40 > /tmp/ncu/hotspots_$name.txt 2>&1
  echo "ncu $name done $SECONDS s"
}
run v4_h64_long 0x34680 --op decode --format v4_fp8 --b 148 --s_q 2 --h_q 64 --topk 16384 --page_block_size 64 --s_kv 32768
run v4_h64_b64 0x34680 --op decode $V4 --b 64 --s_q 2 --h_q 64
cat /tmp/ncu/summary.txt
tar czf $OUT/ncu.tgz -C /tmp ncu
