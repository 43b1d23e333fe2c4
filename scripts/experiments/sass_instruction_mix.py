#!/usr/bin/env python3
"""Executed-instruction mix of a kernel from an ncu per-instruction SASS export.

Input: the `*_sass.csv.gz` files that `SMLA_NCU_SOURCE=1 scripts/gpu_profile.sh` writes (one row
per SASS instruction with "Instructions Executed" and "Warp Stall Sampling (All Samples)").
Output: warp-instructions executed per opcode with their share of all executed instructions and
of the stall samples, then the FP8 dequantisation's ALU share (the e4m3 unpacks, their
HADD2.F32 widenings, one FMUL per widened value and the bf16 packs; see fp8_dequant.cuh).

    scripts/experiments/sass_instruction_mix.py benchmarks/results/profile-decode-v4-h16-2026-11-30/src/profile_1_sass.csv.gz
"""
import argparse
import collections
import csv
import gzip


def opcode(source: str) -> str:
    words = source.split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    # Keep the suffixes that tell conversions apart; drop the rest (HMMA.16816.F32.BF16 -> HMMA).
    if op.startswith(("F2FP", "HADD2.F32")):
        return op
    return op.split(".")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv_gz")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    with gzip.open(args.csv_gz, "rt") as f:
        rows = list(csv.reader(f))
    header = rows[1]  # row 0 names the kernel
    executed_col = header.index("Instructions Executed")
    source_col = header.index("Source")
    samples_col = header.index("Warp Stall Sampling (All Samples)")
    executed = collections.Counter()
    samples = collections.Counter()
    for row in rows[2:]:
        try:
            n, s = int(row[executed_col]), int(row[samples_col])
        except (ValueError, IndexError):
            continue
        op = opcode(row[source_col])
        executed[op] += n
        samples[op] += s
    total, total_samples = sum(executed.values()), max(1, sum(samples.values()))
    print(rows[0][1][:160] if len(rows[0]) > 1 else rows[0][0])
    print(f"warp-instructions executed: {total:,}")
    for op, n in executed.most_common(args.top):
        print(f"  {op:28s} {n:>12,} {100 * n / total:5.1f} %   stall samples "
              f"{100 * samples[op] / total_samples:5.1f} %")
    # Dequantisation ALU: every unpack yields 2 values, each widened once (HADD2.F32) and scaled
    # once (FMUL); packs to bf16 beyond that count are softmax's P, so cap them at the unpacks.
    unpack = executed["F2FP.F16.E4M3.UNPACK_B"]
    widen = executed["HADD2.F32"]
    pack = min(executed["F2FP.BF16.F32.PACK_AB"], unpack)
    dequant = unpack + widen + min(executed["FMUL"], widen) + pack
    print(f"dequantisation ALU (unpack + widen + scale + pack): {dequant:,} = "
          f"{100 * dequant / total:.1f} % of the executed instructions")


if __name__ == "__main__":
    main()
