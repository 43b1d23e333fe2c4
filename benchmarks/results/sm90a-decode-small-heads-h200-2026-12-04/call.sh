#!/usr/bin/env bash
# The Hopper decode at 1..32 heads (the tree at fd6540b plus the entry for any head count, the
# default then from 17 heads at one pair per two SMs): the CLI built, 600 random SPEC §5 cases with
# the kernel forced, then the tp-shards decode rows with SMLA_DECODE_SM90A=0 / =1 / unset, round by round.
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(mktemp -d)
bash scripts/build_cli.sh . $B $B/build.log 16 || { tail -30 $B/build.log; exit 1; }
echo "build $SECONDS s"
BIN=$B/sparse-mla
SMLA_DECODE_SM90A=1 timeout 60 $BIN check --backend cuda --cases 600 --seed 20261207 > $OUT/random_check.log 2>&1; echo "random rc $? $(grep -E '^[0-9]+ cases on ' $OUT/random_check.log | tail -1), $(grep -c sm90a_sparse_decode $OUT/random_check.log) on the Hopper decode, $SECONDS s"
mkdir -p /tmp/tp
run() { env $2 $BIN bench --backend cuda --verify off --iters 20 --suite tp-shards --filter decode --json /tmp/tp/$1-$3.json > /tmp/tp/$1-$3.log 2>&1; }
for r in 1 2; do
  (( r == 2 && SECONDS > 230 )) && break
  run portable SMLA_DECODE_SM90A=0 $r; run hopper SMLA_DECODE_SM90A=1 $r; run default SMLA_UNUSED=1 $r
  echo "round $r $SECONDS s"
done
python3 - /tmp/tp <<'PY' | tee $OUT/tp.txt
import glob, json, sys
out = sys.argv[1]
def med(p): return {c["name"]: (c["median_ms"] * 1e3, c.get("kernel", "?")) for c in json.load(open(p))["cases"]}
sides = ["portable", "hopper", "default"]
runs = {s: [med(p) for p in sorted(glob.glob(f"{out}/{s}-*.json"))] for s in sides}
print("runs per side:", {s: len(v) for s, v in runs.items()})
for k in runs["portable"][0]:
    lo = {s: min(r[k][0] for r in runs[s]) for s in sides}
    print(f"{k[:60]:60s} portable {lo['portable']:8.1f} hopper {lo['hopper']:8.1f} default {lo['default']:8.1f}  H/P {lo['hopper']/lo['portable']:.3f} D/P {lo['default']/lo['portable']:.3f}  [{runs['default'][0][k][1]}]")
PY
tar czf $OUT/tp.tgz -C /tmp tp
