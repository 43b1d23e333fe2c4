"""Per row: A (portable) and B (Hopper) lower median of the rounds, B / A, kernels, verify."""
import glob, json, math, os, sys
d = sys.argv[1]
rows = {}
for p in glob.glob(os.path.join(d, "*.json")):
    side, rnd, i = os.path.basename(p)[:-5].split("-")
    c = json.load(open(p))["cases"][0]
    rows.setdefault(int(i), {}).setdefault(side, []).append(c)
logs = {}
ratios = []
print(f"{'row':>3} {'A us':>9} {'B us':>9} {'B/A':>6}  verify  kernels  name")
for i in sorted(rows):
    r = rows[i]
    def t(side):
        v = sorted(1e3 * c["median_ms"] for c in r.get(side, []))
        return v[(len(v) - 1) // 2] if v else float("nan")
    a, b = t("a"), t("b")
    ok = all(c["verify"]["ok"] for s in r.values() for c in s)
    ks = "/".join(sorted({c.get("kernel", "?") for c in r.get("a", [])})) + " | " + \
         "/".join(sorted({c.get("kernel", "?") for c in r.get("b", [])}))
    name = (r.get("a") or r.get("b"))[0]["name"]
    if a == a and b == b:
        ratios.append(b / a)
    print(f"{i:>3} {a:9.1f} {b:9.1f} {b / a:6.3f}  {'ok' if ok else 'FAIL'}  {ks}  {name}")
if ratios:
    print(f"geomean B/A {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} over {len(ratios)} rows")
