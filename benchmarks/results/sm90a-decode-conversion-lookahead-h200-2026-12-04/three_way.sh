#!/usr/bin/env bash
# v16 (A), v18 (B), v19 (C, this tree) of the Hopper decode: three CLIs, the decode rows with the
# kernel forced A B C, C checked (1000 random SPEC §5 cases, the rows verified), then A and C again
# if there is time.
# The trees: this one at 5057b67 (v19); devrun/to_v16.patch = `git diff 5057b67 59bab6f -- src`
# and devrun/to_v18.patch = `git diff 5057b67 8471e0f -- src`, made before the call (not kept).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
mk() { local t=$1 p=$2; mkdir -p $t; (tar --exclude='./build*' --exclude='./.git' -cf - .) | (cd $t && tar -xf -); (cd $t && patch -p1 --quiet < $ROOT/$p); }
mk /tmp/tA devrun/to_v16.patch; mk /tmp/tB devrun/to_v18.patch
B=$(mktemp -d)
bash scripts/build_cli.sh /tmp/tA $B/a $B/a.log 6 & p1=$!
bash scripts/build_cli.sh /tmp/tB $B/b $B/b.log 5 & p2=$!
bash scripts/build_cli.sh . $B/c $B/c.log 5 & p3=$!
wait $p1 && wait $p2 && wait $p3 || { tail -20 $B/*.log; exit 1; }
echo "builds $SECONDS s"
mkdir -p /tmp/abc
run() { SMLA_DECODE_SM90A=1 $B/$1/sparse-mla bench --backend cuda --verify off --iters 20 --suite v32,v4 --filter decode --json /tmp/abc/$1-$2.json > /dev/null; }
for side in a b c; do run $side 1; done
echo "round 1 $SECONDS s"
SMLA_DECODE_SM90A=1 timeout 60 $B/c/sparse-mla check --backend cuda --cases 1000 --seed 20261205 > $OUT/random_check.log 2>&1; echo "random rc $? $(grep -E '^[0-9]+ cases on ' $OUT/random_check.log | tail -1), $(grep -c sm90a_sparse_decode $OUT/random_check.log) on the Hopper decode, $SECONDS s"
SMLA_DECODE_SM90A=1 timeout 80 $B/c/sparse-mla bench --backend cuda --iters 3 --suite v32,v4 --filter decode > $OUT/verify.log 2>&1; echo "verify rc $? fails $(grep -cE 'FAIL|ERROR' $OUT/verify.log) $SECONDS s"
if (( SECONDS < 200 )); then run a 2; run c 2; echo "round 2 (a, c) $SECONDS s"; fi
python3 - /tmp/abc <<'PY' | tee $OUT/abc.txt
import glob, json, math, os, sys
out = sys.argv[1]
def med(path): return {(c.get("suite"), c["name"]): c["median_ms"] * 1e3 for c in json.load(open(path))["cases"]}
runs = {s: [med(p) for p in sorted(glob.glob(f"{out}/{s}-*.json"))] for s in "abc"}
lo = {s: {k: min(r[k] for r in runs[s]) for k in runs[s][0]} for s in "abc"}
print("runs per side:", {s: len(v) for s, v in runs.items()})
g = {"b/a": [], "c/b": [], "c/a": []}
for k in lo["a"]:
    a, b, c = lo["a"][k], lo["b"][k], lo["c"][k]
    for key, r in (("b/a", b / a), ("c/b", c / b), ("c/a", c / a)): g[key].append(r)
    print(f"{k[0]:9s} {k[1][:62]:62s} v16 {a:8.1f} v18 {b:8.1f} v19 {c:8.1f}  v18/v16 {b/a:.3f} v19/v18 {c/b:.3f} v19/v16 {c/a:.3f}")
print("geomean " + ", ".join(f"{k} {math.exp(sum(map(math.log, v)) / len(v)):.3f}" for k, v in g.items()))
PY
tar czf $OUT/abc_json.tgz -C /tmp abc
