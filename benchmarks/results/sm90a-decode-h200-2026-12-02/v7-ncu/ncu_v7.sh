#!/usr/bin/env bash
# ncu of the Hopper decode (SMLA_DECODE_SM90A=1) on V4 h64 b64 and V3.2 b64: full set, source page,
# ncu_waits summary. Writes to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD; BUILD=$ROOT/build-gpu
t0=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 "-DCMAKE_PREFIX_PATH=$ROOT/.gpu-deps" > $OUT/build.log 2>&1 && cmake --build $BUILD -j 16 --target sparse-mla >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
run() { # name full0 flags...
  local name=$1 full0=$2; shift 2
  SMLA_DECODE_SM90A=1 timeout 200 $NCU -k regex:sm90a_sparse_decode --set full --import-source no --launch-skip 2 --launch-count 1 -f -o $BUILD/$name $BUILD/sparse-mla bench "$@" --backend cuda --iters 3 --warmup 0 --verify off > $BUILD/$name.log 2>&1 || { tail -5 $BUILD/$name.log; return; }
  $NCU -i $BUILD/$name.ncu-rep --page details > $BUILD/details_$name.txt 2>&1
  $NCU -i $BUILD/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > $OUT/source_$name.csv.gz
  python3 scripts/ncu_waits.py $OUT/source_$name.csv.gz $full0 >> $OUT/summary.txt 2>&1
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Executed Ipc A" $BUILD/details_$name.txt | head -12 >> $OUT/summary.txt
}
run v4_h64_b64 0x34680 --op decode --format v4_fp8 --b 64 --s_q 2 --h_q 64 --topk 128 --page_block_size 256 --s_kv 16384 --extra_topk 512 --extra_page_block_size 64 --extra_s_kv 16384
run v32_b64 0x38680 --op decode --format v32_fp8 --b 64 --s_q 2 --h_q 128 --topk 2048 --page_block_size 64 --s_kv 16384
cat $OUT/summary.txt
cp $BUILD/details_*.txt $OUT/ 2>/dev/null
python3 scripts/ncu_hotspots.py <(gunzip -c $OUT/source_v32_b64.csv.gz) 30 > $OUT/hotspots_v32_b64.txt 2>&1
