"""Per row and shared fraction F: time (lower median of the rounds), distinct bytes, time / F=0."""
import glob, json, os, sys
d = sys.argv[1]
rows = {}
for p in glob.glob(os.path.join(d, "*.json")):
    rnd, i, f = os.path.basename(p)[:-5].split("-")
    c = json.load(open(p))["cases"][0]
    rows.setdefault(int(i), {}).setdefault(float(f), []).append(c)
print(f"{'row':>3} {'F':>4} {'us':>8} {'x F=0':>6} {'MB':>8} {'bytes x':>7} {'TB/s':>6} verify kernel  name")
for i in sorted(rows):
    base = None
    for f in sorted(rows[i]):
        cs = rows[i][f]
        v = sorted(1e3 * c["median_ms"] for c in cs)
        t = v[(len(v) - 1) // 2]
        mb = cs[0]["bytes"] / 1e6
        if base is None:
            base = (t, mb)
        ok = all(c["verify"]["ok"] for c in cs)
        print(f"{i:>3} {f:4.1f} {t:8.1f} {t / base[0]:6.3f} {mb:8.1f} {mb / base[1]:7.3f} "
              f"{mb / t:6.2f} {'ok' if ok else 'FAIL'} {cs[0].get('kernel', '?')}  {cs[0]['name']}")
