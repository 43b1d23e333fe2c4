#!/usr/bin/env bash
# A (523d834) / B (9119cb4: Q first + launch_dependents) / C (61da041: B + the conversion in two
# turns) / D (C without launch_dependents): CLI builds, the decode bench alternating A B C D
# twice, a table of each side's lower median over A's (table.txt). Run from the repository root
# at 61da041 with devrun/to_a.patch = git diff HEAD 523d834 -- src, devrun/to_b.patch = git diff
# HEAD 9119cb4 -- src, devrun/to_d.patch = HEAD with the launch_dependents line of
# src/cuda/sm90a/sparse_decode/kernel.cuh removed, and this folder's table.py (the table).
set -uo pipefail
ROOT=$PWD; t0=$(date +%s)
for v in a b d; do rm -rf /tmp/t$v; mkdir /tmp/t$v; tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -xf - -C /tmp/t$v; (cd /tmp/t$v && patch -p1 -s < devrun/to_$v.patch) || { echo PATCH $v FAILED; exit 1; }; done
mkdir -p /tmp/tc; tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -xf - -C /tmp/tc
pids=()
for v in a b c d; do bash scripts/build_cli.sh /tmp/t$v /tmp/b$v /tmp/build_$v.log 4 & pids+=($!); done
for p in "${pids[@]}"; do wait $p || { echo BUILD FAILED; tail -30 /tmp/build_*.log; exit 1; }; done
echo "builds $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/res
for round in 1 2; do for v in a b c d; do
  SMLA_DECODE_SM90A=1 timeout 120 /tmp/b$v/sparse-mla bench --backend cuda --verify off --iters 20 --suite v32,v4 --filter decode --json /tmp/res/$v-$round.json > /tmp/res/$v-$round.txt 2>&1 || echo "bench $v $round rc $?"
done; done
echo "total $(( $(date +%s) - t0 )) s"
python3 benchmarks/results/sm90a-decode-code-warm-h200-2026-12-03/ab-conversion-turns/table.py /tmp/res | tee $OUT/table.txt
for f in a-1 a-2 c-1 c-2 d-1 d-2; do cp /tmp/res/$f.json $OUT/; done

