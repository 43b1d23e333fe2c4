#!/usr/bin/env python3
"""Summarises `ncu --page source --print-source sass --csv` output: per-column totals of the
numeric (sampling) columns and the SASS instructions with the most warp-stall samples.

    ncu_hotspots.py SASS_CSV [TOP]      (gpu_profile.sh runs it with SMLA_NCU_SOURCE=1)
"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    # The header is the first row naming a SASS/Source column.
    head_at = next(i for i, r in enumerate(rows) if any("Source" in c or "Sass" in c for c in r))
    header, body = rows[head_at], rows[head_at + 1:]
    text_col = next(i for i, c in enumerate(header) if c in ("Source", "Sass", "SASS"))
    numeric = [i for i, c in enumerate(header)
               if i != text_col and any(number(r[i]) for r in body if i < len(r))]
    totals = {header[i]: sum(number(r[i]) or 0 for r in body if i < len(r)) for i in numeric}
    print("column totals:")
    for name, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        if total:
            print(f"  {total:14.0f}  {name}")
    key = next((i for i in numeric if "All Samples" in header[i]),
               next((i for i in numeric if "Sampling" in header[i]), numeric[0]))
    print(f"\ntop {top} instructions by '{header[key]}':")
    ranked = sorted(body, key=lambda r: -(number(r[key]) or 0) if key < len(r) else 0)
    all_samples = totals[header[key]] or 1
    for r in ranked[:top]:
        value = number(r[key]) or 0
        addr = r[0] if header[0] != header[text_col] else ""
        print(f"  {100 * value / all_samples:5.1f}%  {addr:>8}  {r[text_col][:90]}")


if __name__ == "__main__":
    main()
