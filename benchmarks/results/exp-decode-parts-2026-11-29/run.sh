#!/usr/bin/env bash
# Experiment: decode time against the number of split parts (SMLA_EXP_PARTS_PERCENT of the default).
set -uo pipefail
OUT_DIR=$1; mkdir -p $OUT_DIR
cmake -S . -B /tmp/bx -G Ninja -DCMAKE_BUILD_TYPE=Release -DSMLA_ENABLE_CUDA=ON -DSMLA_CUDA_ARCHS=90a \
  -DSMLA_BUILD_TESTS=OFF -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_PREFIX_PATH=$PWD/.gpu-deps >/dev/null \
  && cmake --build /tmp/bx -j 16 --target sparse-mla > $OUT_DIR/build.log 2>&1 || { tail -20 $OUT_DIR/build.log; exit 1; }
for pct in 100 67 50 33 17; do
  SMLA_EXP_PARTS_PERCENT=$pct /tmp/bx/sparse-mla bench --backend cuda --verify off --iters 20 --suite tp-shards --filter decode --json $OUT_DIR/tp-$pct.json >/dev/null 2>&1
  SMLA_EXP_PARTS_PERCENT=$pct /tmp/bx/sparse-mla bench --backend cuda --verify off --iters 20 --suite v32,v4-flash,v4-pro --filter "b=2 " --json $OUT_DIR/b2-$pct.json >/dev/null 2>&1
done
python3 - $OUT_DIR <<'PY'
import json, sys
d = sys.argv[1]
pcts = [100, 67, 50, 33, 17]
rows = {}
for kind in ("tp", "b2"):
    for p in pcts:
        for c in json.load(open(f"{d}/{kind}-{p}.json"))["cases"]:
            rows.setdefault(c["name"], {})[p] = c["median_ms"] * 1e3
print(f"{'case':62s}" + "".join(f"{p:>8d}%" for p in pcts))
for name, r in rows.items():
    print(f"{name[:62]:62s}" + "".join(f"{r.get(p, float('nan')):8.1f} " for p in pcts))
PY
