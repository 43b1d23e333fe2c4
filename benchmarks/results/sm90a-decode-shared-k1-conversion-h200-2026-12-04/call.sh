#!/usr/bin/env bash
# v18 (A, the tree at 472e7a9): gpu_check with the Hopper decode forced (GPU suite, random cases,
# sanitizers), while v20 (B = A + devrun/v20.patch, made by `git revert --no-commit d4f4072 &&
# git diff HEAD`) builds its CLI; then the decode rows A B A B, B's 1000 random cases and verified rows.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
mkdir -p /tmp/tB; (tar --exclude='./build*' --exclude='./.git' -cf - .) | (cd /tmp/tB && tar -xf -); (cd /tmp/tB && patch -p1 --quiet < $ROOT/devrun/v20.patch) || exit 1
B=$(mktemp -d)
bash scripts/build_cli.sh /tmp/tB $B/b $B/b.log 6 & pb=$!
SMLA_COMMIT=472e7a9 SMLA_DECODE_SM90A=1 SMLA_BENCH_SUITES=none SMLA_GPU_CHECK_BUDGET_S=380 bash scripts/gpu_check.sh /tmp/chk > /tmp/chk.out 2>&1; echo "gpu_check rc $? $SECONDS s"; tail -14 /tmp/chk.out
wait $pb || { tail -20 $B/b.log; exit 1; }
tar czf $OUT/check_v18.tgz -C /tmp chk chk.out
mkdir -p /tmp/ab
run() { SMLA_DECODE_SM90A=1 $2 bench --backend cuda --verify off --iters 20 --suite v32,v4 --filter decode --json /tmp/ab/$1-$3.json > /dev/null; }
A=build-gpu/sparse-mla; BB=$B/b/sparse-mla
run a $A 1; run b $BB 1; echo "round 1 $SECONDS s"
SMLA_DECODE_SM90A=1 timeout 60 $BB check --backend cuda --cases 1000 --seed 20261206 > $OUT/random_check_v20.log 2>&1; echo "random rc $? $(grep -E '^[0-9]+ cases on ' $OUT/random_check_v20.log | tail -1), $(grep -c sm90a_sparse_decode $OUT/random_check_v20.log) on the Hopper decode, $SECONDS s"
SMLA_DECODE_SM90A=1 timeout 80 $BB bench --backend cuda --iters 3 --suite v32,v4 --filter decode > $OUT/verify_v20.log 2>&1; echo "verify rc $? fails $(grep -cE 'FAIL|ERROR' $OUT/verify_v20.log) $SECONDS s"
if (( SECONDS < 480 )); then run a $A 2; run b $BB 2; echo "round 2 $SECONDS s"; fi
python3 - /tmp/ab <<'PY' | tee $OUT/ab.txt
import glob, json, math, sys
out = sys.argv[1]
def med(p): return {(c.get("suite"), c["name"]): c["median_ms"] * 1e3 for c in json.load(open(p))["cases"]}
runs = {s: [med(p) for p in sorted(glob.glob(f"{out}/{s}-*.json"))] for s in "ab"}
lo = {s: {k: min(r[k] for r in runs[s]) for k in runs[s][0]} for s in "ab"}
print("runs per side:", {s: len(v) for s, v in runs.items()})
g = []
for k in lo["a"]:
    a, b = lo["a"][k], lo["b"][k]; g.append(b / a)
    print(f"{k[0]:9s} {k[1][:62]:62s} v18 {a:8.1f} v20 {b:8.1f}  v20/v18 {b/a:.3f}")
print(f"geomean v20/v18 {math.exp(sum(map(math.log, g)) / len(g)):.3f}")
PY
tar czf $OUT/ab_json.tgz -C /tmp ab
