#!/usr/bin/env bash
# The calls of this folder, run from the repository root on the device right after
# ../sm90a-decode-f16-operands-h100-2026-12-07/ on the same warm machine (whose A binary they
# reuse): A = a8eb498 (the decode's code equals main's); B = devrun/f16conv.patch = `git show
# d720a52` (f16-conversion/: e4m3 -> f16 and one f16 multiply, wrong numbers by design), then the
# same script with f16conv.patch -> noconv.patch = `git show 581b417`, /tmp/t/c -> /tmp/t/d,
# /tmp/bld/c -> /tmp/bld/d and bound -> bound0 (no-conversion/: the raw bytes are the operands).
set -uo pipefail
ROOT=$PWD; R=$OUT/bound; mkdir -p $R; t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv > $R/gpu.txt
rm -rf /tmp/t/c; mkdir -p /tmp/t/c
(tar --exclude='./build*' --exclude='./.git' -cf - .) | (cd /tmp/t/c && tar -xf -)
(cd /tmp/t/c && patch -p1 --quiet < $ROOT/devrun/f16conv.patch) || { echo "patch failed"; exit 1; }
[[ -x /tmp/bld/a/sparse-mla ]] && echo "a kept" || bash scripts/build_cli.sh $ROOT /tmp/bld/a $R/build-a.log 8 &
bash scripts/build_cli.sh /tmp/t/c /tmp/bld/c $R/build-c.log 8
wait; echo "builds $(( $(date +%s) - t0 )) s"; ls /tmp/bld/*/sparse-mla
export SMLA_AB_A_BIN=/tmp/bld/a/sparse-mla SMLA_AB_B_BIN=/tmp/bld/c/sparse-mla SMLA_AB_ROUNDS=2
timeout 200 bash scripts/gpu_ab.sh $R/ab devrun/f16conv.patch --suite v32,v4 --filter "b=64 " | tail -4
timeout 150 bash scripts/gpu_ab.sh $R/ab-b128 devrun/f16conv.patch --suite v4 --filter "b=128 " | tail -3
echo "total $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf bound.tgz bound && rm -rf bound
