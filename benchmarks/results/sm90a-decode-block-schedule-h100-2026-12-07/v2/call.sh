#!/usr/bin/env bash
# device call: the block schedule's second version (this tree) checked and A/B'd against the seesaw.
set -uo pipefail
OUT=${OUT:?}; ROOT=$(pwd); B=/tmp/smla-builds; LOG=$OUT/progress.txt; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$LOG"
mkdir -p $B
cmake -S "$ROOT" -B $B/build-g -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
  -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
  "-DSMLA_KERNELS=portable_sparse_decode_v41fp8*,sm90a_sparse_decode*" "-DCMAKE_PREFIX_PATH=$ROOT/.gpu-deps" > $B/build-g.log 2>&1 &&
  cmake --build $B/build-g -j 16 --target sparse-mla >> $B/build-g.log 2>&1
rc=$?; say "build rc=$rc"; [[ $rc == 0 ]] || { tail -30 $B/build-g.log; exit 1; }
G=$B/build-g/sparse-mla
SMLA_DECODE_SM90A=1 SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1 timeout 60 $G check --backend cuda --op decode --cases 200 --seed 20261208 > $OUT/g-check.txt 2>&1
rc=$?; say "check rc=$rc $(tail -1 $OUT/g-check.txt)"; [[ $rc == 124 ]] && exit 1
SMLA_AB_ENV="SMLA_DECODE_SM90A=1" SMLA_AB_ROUNDS=2 SMLA_AB_A_BIN=$G SMLA_AB_A_ENV="SMLA_DECODE_SM90A_BLOCK_SCHEDULE=0" SMLA_AB_B_ENV="SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1" \
  timeout 240 bash scripts/gpu_ab.sh $OUT/g-ab none --suite v32,v4 --filter decode > $OUT/g-ab.log 2>&1; say "ab rc=$?"
cp $OUT/g-ab/ab.txt $OUT/g-ab.txt 2>/dev/null; mv $OUT/g-ab/a-2.json $OUT/g-a-2.json; mv $OUT/g-ab/b-2.json $OUT/g-b-2.json; rm -rf $OUT/g-ab
cat $OUT/g-ab.txt; say "done"
