#!/usr/bin/env bash
# device call. Builds, in parallel: f = this working tree (the block schedule), e = base + the
# piece-group combine (the V3.2 h16 kernel only), and a chain in one tree P: base (a), then each
# prefill patch in turn (b, c, d; only the prefill units rebuild). Stages as their binaries are
# ready: f check + verify, f A/B (knob 0 vs 1), e sweep (verified rows), prefill A/B/C/D.
set -uo pipefail
OUT=${OUT:?}
ROOT=$(pwd)
B=/tmp/smla-builds
LOG=$OUT/progress.txt
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee -a "$LOG"
mkdir -p $B/bin
configure() {  # configure NAME SRC KERNELS
  cmake -S "$2" -B $B/build-$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON \
    -DSMLA_CUDA_ARCHS=90a -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    "-DSMLA_KERNELS=$3" "-DCMAKE_PREFIX_PATH=$ROOT/.gpu-deps" > $B/build-$1.log 2>&1
}
make_bin() {  # make_bin NAME BUILD JOBS
  cmake --build $B/build-$2 -j $3 --target sparse-mla >> $B/build-$2.log 2>&1 && cp $B/build-$2/sparse-mla $B/bin/$1
  local rc=$?; say "build $1 rc=$rc"
  [[ $rc == 0 ]] || tail -40 $B/build-$2.log > $OUT/build-$1.fail.txt
}
for s in e p; do rm -rf $B/src-$s; mkdir -p $B/src-$s; tar -xzf devrun/base.tar.gz -C $B/src-$s; done
(cd $B/src-e && patch -p1 --quiet < "$ROOT/devrun/e.patch")
say "trees ready"
(configure f "$ROOT" "portable_sparse_decode_v41fp8*,sm90a_sparse_decode*" && make_bin f f 8) &
(configure e $B/src-e "portable_sparse_decode_v32fp8_d576_h16*" && make_bin e e 4) &
(configure p $B/src-p "sm90a_sparse_prefill*" && make_bin a p 4 &&
  for s in b c d; do (cd $B/src-p && patch -p1 --quiet < "$ROOT/devrun/$s.patch") && make_bin $s p 4;
    (cd $B/src-p && patch -p1 -R --quiet < "$ROOT/devrun/$s.patch"); done) &
wait_bin() { while [[ ! -x $B/bin/$1 && ! -f $OUT/build-$1.fail.txt ]]; do sleep 2; done; [[ -x $B/bin/$1 ]]; }
F=$B/bin/f
if wait_bin f; then
  grep -h "spill" $B/build-f.log | grep block_decode | head -8 > $OUT/f-spills.txt
  SMLA_DECODE_SM90A=1 SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1 timeout 60 $F check --backend cuda --op decode --cases ${FCASES:-200} --seed 20261207 > $OUT/f-check.txt 2>&1
  frc=$?; say "f check rc=$frc $(tail -3 $OUT/f-check.txt | tr '\n' ' ' | cut -c1-400)"
  if [[ $frc != 124 ]]; then
    SMLA_DECODE_SM90A=1 SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1 timeout 60 $F bench --backend cuda --verify subset --iters 3 --suite v32,v4 --filter decode --json $OUT/f-verify.json > $OUT/f-verify.txt 2>&1
    say "f verify rc=$? $(tail -3 $OUT/f-verify.txt | tr '\n' ' ' | cut -c1-300)"
    SMLA_AB_ENV="SMLA_DECODE_SM90A=1" SMLA_AB_ROUNDS=${FROUNDS:-2} SMLA_AB_A_BIN=$F SMLA_AB_A_ENV="SMLA_DECODE_SM90A_BLOCK_SCHEDULE=0" SMLA_AB_B_ENV="SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1" \
      timeout 200 bash scripts/gpu_ab.sh $OUT/f-ab none --suite v32,v4 --filter decode > $OUT/f-ab.log 2>&1; say "f ab rc=$?"
    tail -25 $OUT/f-ab/ab.txt 2>/dev/null
  fi
fi
if wait_bin e; then
  SMLA_AB_ROUNDS=2 SMLA_AB_A_BIN=$B/bin/e \
    SMLA_AB_A_ENV="SMLA_COMBINE_PIECE_GROUPS=1" SMLA_AB_B_ENV="" \
    SMLA_AB_C_ENV="SMLA_DECODE_NUM_PARTS=4 SMLA_COMBINE_PIECE_GROUPS=1" SMLA_AB_D_ENV="SMLA_DECODE_NUM_PARTS=4" \
    SMLA_AB_E_ENV="SMLA_DECODE_NUM_PARTS=8 SMLA_COMBINE_PIECE_GROUPS=1" SMLA_AB_F_ENV="SMLA_DECODE_NUM_PARTS=8" \
    SMLA_AB_G_ENV="SMLA_DECODE_NUM_PARTS=16 SMLA_COMBINE_PIECE_GROUPS=1" SMLA_AB_H_ENV="SMLA_DECODE_NUM_PARTS=16" \
    SMLA_AB_I_ENV="SMLA_DECODE_NUM_PARTS=32 SMLA_COMBINE_PIECE_GROUPS=1" SMLA_AB_J_ENV="SMLA_DECODE_NUM_PARTS=32" \
    timeout 100 bash scripts/gpu_ab.sh $OUT/sweep-v32h16b1 none none none none none none none none none \
    --op decode --format v32_fp8 --h_q 16 --b 1 --s_q 1 --topk 2048 --page_block_size 64 --s_kv 16384 > $OUT/sweep.log 2>&1; say "sweep rc=$?"
  tail -14 $OUT/sweep-v32h16b1/ab.txt 2>/dev/null
fi
if wait_bin d; then
  SMLA_AB_ROUNDS=2 SMLA_AB_A_BIN=$B/bin/a SMLA_AB_B_BIN=$B/bin/b SMLA_AB_C_BIN=$B/bin/c SMLA_AB_D_BIN=$B/bin/d \
    timeout 150 bash scripts/gpu_ab.sh $OUT/prefill-bcd devrun/b.patch devrun/c.patch devrun/d.patch --suite v32,v4 --filter prefill > $OUT/prefill-bcd.log 2>&1; say "prefill A/B rc=$?"
  tail -14 $OUT/prefill-bcd/ab.txt 2>/dev/null
fi
say "all done"
