#!/usr/bin/env python3
"""Summarises `ncu --page source --print-source sass --csv` output: per-column totals of the
numeric (sampling) columns, the SASS instructions with the most warp-stall samples (each with its
main stall reasons), the samples per barrier-delimited segment of the code (a kernel's phases:
the instructions between two BAR / named-barrier / SYNCS waits), so a profile says which phase
holds the time and why, and the executed warp-instructions per opcode with their share of the
stall samples, so it also says what the kernel spends its issue slots on (the FP8
dequantisation's ALU is summed on its own line).

    ncu_hotspots.py SASS_CSV[.gz] [TOP]      (gpu_profile.sh runs it with SMLA_NCU_SOURCE=1)
"""
import collections
import csv
import gzip
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
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
    # Stall-reason columns: "stall_x" (all samples), not their "(Not Issued)" twins.
    reasons = [i for i in numeric
               if header[i].startswith("stall_") and "Not Issued" not in header[i]]

    def main_reasons(r, count=3):
        values = sorted(((number(r[i]) or 0, header[i][6:]) for i in reasons if i < len(r)),
                        reverse=True)
        return " ".join(f"{name} {v:.0f}" for v, name in values[:count] if v > 0)

    for r in ranked[:top]:
        value = number(r[key]) or 0
        addr = r[0] if header[0] != header[text_col] else ""
        print(f"  {100 * value / all_samples:5.1f}%  {addr:>8}  {r[text_col][:70]:70}  "
              f"{main_reasons(r)}")

    # Segments: a new one starts after each barrier wait, in address (row) order.
    segments = []
    current = None
    for r in body:
        text = r[text_col] if text_col < len(r) else ""
        if current is None:
            current = {"first": r[0], "rows": 0, "samples": 0.0, "hmma": 0, "ldsm": 0,
                       "reasons": {}}
        current["rows"] += 1
        current["samples"] += (number(r[key]) or 0) if key < len(r) else 0
        current["hmma"] += "HMMA" in text
        current["ldsm"] += "LDSM" in text
        for i in reasons:
            if i < len(r):
                current["reasons"][header[i][6:]] = (current["reasons"].get(header[i][6:], 0) +
                                                     (number(r[i]) or 0))
        if "BAR.SYNC" in text or "BAR.RED" in text or "SYNCS.PHASECHK" in text:
            current["last"] = r[0]
            segments.append(current)
            current = None
    if current is not None:
        current["last"] = body[-1][0] if body else ""
        segments.append(current)
    print(f"\nsegments between barrier waits (>= 1 % of '{header[key]}'):")
    for seg in segments:
        share = 100 * seg["samples"] / all_samples
        if share < 1.0:
            continue
        mix = sorted(((v, k) for k, v in seg["reasons"].items()), reverse=True)[:3]
        mix_text = " ".join(f"{k} {100 * v / (seg['samples'] or 1):.0f}%" for v, k in mix if v)
        print(f"  {share:5.1f}%  {seg['first']:>8}..{seg['last']:<8}  {seg['rows']:5d} instr "
              f"{seg['hmma']:4d} HMMA {seg['ldsm']:4d} LDSM  {mix_text}")
    executed_col = next((i for i in numeric if header[i] == "Instructions Executed"), None)
    if executed_col is not None:
        instruction_mix(body, text_col, executed_col, key, top)


def opcode(source):
    """HMMA.16816.F32.BF16 -> HMMA; conversions keep their suffixes (F2FP.F16.E4M3.UNPACK_B)."""
    words = source.split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op if op.startswith(("F2FP", "HADD2.F32")) else op.split(".")[0]


def instruction_mix(body, text_col, executed_col, samples_col, top):
    executed = collections.Counter()
    samples = collections.Counter()
    for r in body:
        if max(text_col, executed_col, samples_col) >= len(r):
            continue
        op = opcode(r[text_col])
        executed[op] += number(r[executed_col]) or 0
        samples[op] += number(r[samples_col]) or 0
    total = sum(executed.values()) or 1
    total_samples = sum(samples.values()) or 1
    print(f"\nexecuted warp-instructions by opcode ({total:,.0f} in all):")
    for op, n in executed.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {n:14,.0f}  {op:26}  stall samples "
              f"{100 * samples[op] / total_samples:5.1f}%")
    # FP8 dequantisation (fp8_dequant.cuh): every unpack yields 2 values, each widened once
    # (HADD2.F32) and scaled once (FMUL); packs beyond the unpacks are softmax's P.
    unpack = executed["F2FP.F16.E4M3.UNPACK_B"]
    widen = executed["HADD2.F32"]
    if unpack:
        dequant = unpack + widen + min(executed["FMUL"], widen) + min(
            executed["F2FP.BF16.F32.PACK_AB"], unpack)
        print(f"  FP8 dequantisation ALU (unpack + widen + scale + pack): "
              f"{100 * dequant / total:.1f}% of the executed instructions")


if __name__ == "__main__":
    main()
