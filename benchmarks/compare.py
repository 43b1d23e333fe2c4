#!/usr/bin/env python3
"""Compare two `sparse-mla bench --json` result files case by case.

Cases are matched by suite and name (the full-size case in the project vocabulary). For each
pair it prints both median times, the speed-up (old time / new time, > 1 = faster), both
FLOP/s and the verification results, then a geometric-mean speed-up. Cases present in only one
file are listed. Exits 1 when a case got slower than --threshold allows or a verification
failed in the new file, so the script can gate a change; 0 otherwise.

    python3 benchmarks/compare.py benchmarks/results/old.json benchmarks/results/new.json
"""
import argparse
import json
import math
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    cases = {}
    for c in data.get("cases", []):
        cases[(c["suite"], c["name"])] = c
    return data, cases


def describe(data):
    gpus = data.get("gpus") or []
    where = gpus[0]["name"] if gpus and data.get("backend") == "cuda" else data["machine"]["cpu_model"]
    commit = data.get("git_commit", "?")[:12] + ("+dirty" if data.get("git_dirty") else "")
    return f"{data.get('backend')} on {where}, scale {data.get('scale')}, commit {commit}, {data.get('date')}"


def fmt_time(ms):
    if ms is None:
        return "-"
    if ms < 1:
        return f"{ms * 1e3:.3g} us"
    if ms < 1e3:
        return f"{ms:.3g} ms"
    return f"{ms / 1e3:.3g} s"


def fmt_rate(per_s):
    if per_s is None:
        return "-"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {prefix}FLOP/s"
    return f"{per_s:.3g} FLOP/s"


def verified(c):
    if c.get("error"):
        return "ERROR"
    v = c.get("verify")
    if not v:
        return "off"
    return ("pass" if v["ok"] else "FAIL") + f" {v['checked']}/{v['total']}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="baseline result JSON")
    parser.add_argument("new", help="result JSON to compare with the baseline")
    parser.add_argument("--threshold", type=float, default=0.05,
                        help="slow-down that counts as a regression (fraction, default 0.05)")
    args = parser.parse_args()

    old_data, old = load(args.old)
    new_data, new = load(args.new)
    print(f"old: {args.old}: {describe(old_data)}")
    print(f"new: {args.new}: {describe(new_data)}")
    for key in ("backend", "scale"):
        if old_data.get(key) != new_data.get(key):
            print(f"warning: the files differ in {key} ({old_data.get(key)} vs {new_data.get(key)}): "
                  "times are not comparable")

    rows = [("suite", "case", "old", "new", "speed-up", "old FLOP/s", "new FLOP/s", "new verified")]
    ratios = []
    regressions = []
    failures = []
    # Decode times compare like with like: the new file's schedule mode when the old file has it,
    # else both with the schedule built in every call (files before --decode_schedule timed only
    # that mode).
    mode = new_data.get("decode_schedule", "build")
    if old_data.get("decode_schedule", "build") != mode and mode == "reuse":
        print("note: decode cases are compared with the schedule built in every call "
              "(the old file predates --decode_schedule reuse)")

    def decode_time(case, data, wanted):
        if "decode_schedule" not in data:  # older files: median_ms built the schedule every call
            return case.get("median_ms") if wanted == "build" else None
        return case.get(f"median_ms_schedule_{wanted}")

    for key in [k for k in new if k in old]:
        o, n = old[key], new[key]
        om, nm = o.get("median_ms"), n.get("median_ms")
        if n.get("op") == "decode":
            use = mode if decode_time(o, old_data, mode) is not None else "build"
            om, nm = decode_time(o, old_data, use), decode_time(n, new_data, use)
        speedup = om / nm if om and nm else None
        if speedup is not None:
            ratios.append(speedup)
            if speedup < 1.0 / (1.0 + args.threshold):
                regressions.append((key, speedup))
        if n.get("error") or (n.get("verify") and not n["verify"]["ok"]):
            failures.append(key)
        rows.append((key[0], key[1], fmt_time(om), fmt_time(nm),
                     f"{speedup:.2f}x" if speedup is not None else "-",
                     fmt_rate(o.get("flop_per_s")), fmt_rate(n.get("flop_per_s")), verified(n)))

    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
        if i == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))

    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\n{len(ratios)} cases in both files; geometric-mean speed-up {geomean:.3f}x")
    for key in [k for k in old if k not in new]:
        print(f"only in old: {key[0]}: {key[1]}")
    for key in [k for k in new if k not in old]:
        print(f"only in new: {key[0]}: {key[1]}")
    for key, s in regressions:
        print(f"regression: {key[0]}: {key[1]}: {s:.2f}x (threshold {args.threshold:.0%})")
    for key in failures:
        print(f"failed in new: {key[0]}: {key[1]}")
    return 1 if regressions or failures else 0


if __name__ == "__main__":
    sys.exit(main())
