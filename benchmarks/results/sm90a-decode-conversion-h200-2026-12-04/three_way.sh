#!/usr/bin/env bash
# v15 (A), v16 (B), v17 (C, this tree) of the Hopper decode: three CLIs built at once, the decode
# rows with the kernel forced, A B C A B C; then C checked: 400 random SPEC §5 cases and the bench
# rows verified with the kernel forced, memcheck and synccheck on 24 random cases.
# The trees: this one at 0f3f55b (v17); devrun/to_v15.patch = `git diff 0f3f55b 87f45cc -- src`
# and devrun/to_v16.patch = `git diff 0f3f55b 148e30a -- src`, made before the call (not kept).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
mk() { local t=$1 p=$2; mkdir -p $t; (tar --exclude='./build*' --exclude='./.git' -cf - .) | (cd $t && tar -xf -); (cd $t && patch -p1 --quiet < $ROOT/$p); }
mk /tmp/tA devrun/to_v15.patch; mk /tmp/tB devrun/to_v16.patch
B=$(mktemp -d)
bash scripts/build_cli.sh /tmp/tA $B/a $B/a.log 6 & p1=$!
bash scripts/build_cli.sh /tmp/tB $B/b $B/b.log 5 & p2=$!
bash scripts/build_cli.sh . $B/c $B/c.log 5 & p3=$!
wait $p1 && wait $p2 && wait $p3 || { tail -20 $B/*.log; exit 1; }
echo "builds $SECONDS s"
mkdir -p /tmp/abc
for round in 1 2; do for side in a b c; do
  SMLA_DECODE_SM90A=1 $B/$side/sparse-mla bench --backend cuda --verify off --iters 20 --suite v32,v4 --filter decode --json /tmp/abc/$side-$round.json > /dev/null
done; done
echo "bench $SECONDS s"
python3 - /tmp/abc <<'PY' | tee $OUT/abc.txt
import json, math, sys
out = sys.argv[1]
def med(n): return {(c.get("suite"), c["name"]): c["median_ms"] for c in json.load(open(f"{out}/{n}.json"))["cases"]}
d = {s: [med(f"{s}-{r}") for r in (1, 2)] for s in "abc"}
lo = {s: {k: min(d[s][0][k], d[s][1][k]) for k in d[s][0]} for s in "abc"}
g = {"b/a": [], "c/b": [], "c/a": []}
for k in lo["a"]:
    a, b, c = lo["a"][k] * 1e3, lo["b"][k] * 1e3, lo["c"][k] * 1e3
    for key, r in (("b/a", b / a), ("c/b", c / b), ("c/a", c / a)): g[key].append(r)
    print(f"{k[0]:9s} {k[1][:62]:62s} v15 {a:8.1f} v16 {b:8.1f} v17 {c:8.1f}  v16/v15 {b/a:.3f} v17/v16 {c/b:.3f} v17/v15 {c/a:.3f}")
print("geomean " + ", ".join(f"{k} {math.exp(sum(map(math.log, v)) / len(v)):.3f}" for k, v in g.items()))
PY
cp /tmp/abc/*.json $OUT/ 2>/dev/null; tar czf $OUT/abc_json.tgz -C /tmp abc; rm -f $OUT/[abc]-[12].json
SMLA_DECODE_SM90A=1 timeout 150 $B/c/sparse-mla check --backend cuda --cases 400 --seed 20261204 > $OUT/random_check.log 2>&1; echo "random rc $? $(grep -E '^[0-9]+ cases on ' $OUT/random_check.log | tail -1) $SECONDS s"
SMLA_DECODE_SM90A=1 timeout 150 $B/c/sparse-mla bench --backend cuda --iters 3 --suite v32,v4,tp-shards --filter decode > $OUT/verify.log 2>&1; echo "verify rc $? $SECONDS s"; grep -cE "FAIL|ERROR" $OUT/verify.log
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck synccheck; do
  SMLA_DECODE_SM90A=1 timeout 100 $SAN --tool $tool $B/c/sparse-mla check --backend cuda --cases 24 --seed 7 > $OUT/$tool.log 2>&1; echo "$tool rc $? $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' $OUT/$tool.log | tail -1) $(grep -E '^[0-9]+ cases on ' $OUT/$tool.log | tail -1) $SECONDS s"
done
