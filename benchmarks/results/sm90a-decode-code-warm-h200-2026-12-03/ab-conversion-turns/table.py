import json, math, sys
d = sys.argv[1]
def med(n):
    return {c["name"]: c["median_ms"] for c in json.load(open(f"{d}/{n}.json"))["cases"]}
v = {x: [med(f"{x}-{r}") for r in (1, 2)] for x in "abcd"}
best = {x: {k: min(v[x][0][k], v[x][1][k]) for k in v[x][0]} for x in "abcd"}
logs = {x: [] for x in "bcd"}
print(f"{'case':70s} {'A us':>9s} {'B us':>9s} {'C us':>9s} {'D us':>9s}  B/A   C/A   D/A   D/C")
for k in best["a"]:
    a = best["a"][k]
    r = {x: best[x][k] / a for x in "bcd"}
    for x in "bcd": logs[x].append(math.log(r[x]))
    print(f"{k[:70]:70s} {a*1e3:9.1f} {best['b'][k]*1e3:9.1f} {best['c'][k]*1e3:9.1f} {best['d'][k]*1e3:9.1f}  {r['b']:.3f} {r['c']:.3f} {r['d']:.3f} {best['d'][k]/best['c'][k]:.3f}")
print("geomean " + " ".join(f"{x.upper()}/A {math.exp(sum(l)/len(l)):.3f}" for x, l in logs.items()))
