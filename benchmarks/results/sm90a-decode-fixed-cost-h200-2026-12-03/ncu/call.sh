#!/usr/bin/env bash
# Cold-start of the sm90a decode: code size (cuobjdump) and ncu with caches flushed (ncu default)
# and not flushed, warp-state stall reasons, V4 h64 b64 s_q 2.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; BUILD=$ROOT/build-gpu
t0=$(date +%s)
bash scripts/build_cli.sh . $BUILD $OUT/build.log || { echo BUILD FAILED; grep -B2 -A10 error $OUT/build.log | head -40; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
B=$BUILD/sparse-mla
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
{
for o in $(find $BUILD -name '*sparse_decode*.o' -o -name '*sparse_prefill*.o' | sort); do
  $CUOBJ -sass $o 2>/dev/null | awk -v f=$(basename $o) '/Function :/ {if (fn) printf "%-60s %-90.90s %7d instr %8d B\n", f, fn, n, 16*n; fn=$3; n=0} /^ +\/\*[0-9a-f]+\*\// {n++} END {if (fn) printf "%-60s %-90.90s %7d instr %8d B\n", f, fn, n, 16*n}'
done
} > $OUT/code_size.txt 2>&1; cat $OUT/code_size.txt | awk '{print $1, $(NF-3), $(NF-1)}' | sort -u | head -40
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
V4="--format v4_fp8 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384 --h_q 64 --s_q 2 --b 64"
for cc in all none; do for k in 1 0; do
  SMLA_DECODE_SM90A=$k timeout 120 $NCU --cache-control $cc --clock-control none -k 'regex:sparse_decode|portable' --launch-skip 3 --launch-count 2 --section SpeedOfLight --section WarpStateStats --section LaunchStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio" $B bench --op decode $V4 --backend cuda --iters 3 --warmup 1 --verify off > $OUT/ncu_${cc}_sm90a$k.txt 2>&1
  echo "== cache-control $cc sm90a=$k"; grep -E "Duration|Warp Cycles Per Issued|no_instruction|long_scoreboard|barrier_per|wait_per|sleeping|branch_res" $OUT/ncu_${cc}_sm90a$k.txt | head -20
done; done
