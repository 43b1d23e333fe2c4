#!/usr/bin/env python3
"""Where the Hopper decode's warps wait, from an ncu source-page CSV (ncu --import R --page source
--csv --print-source sass, gzipped): the warp-stall samples of the consumer code and of the
producer code (from USETMAXREG.DEALLOC to the last EXIT) with the producer's stall reasons, and
of each mbarrier wait site (its try-wait branch plus the retry loop placed after the last EXIT),
the barrier named from its shared-memory offset (Smem<kDqk>: full[4], empty[4], q_full and
q_empty follow the 128 B of validity flags).

    ncu_waits.py SASS_CSV[.gz] FULL0_OFFSET     (gpu_profile.sh runs it with SMLA_NCU_FULL0)
"""
import collections, csv, gzip, re, sys

NAMES = ["full[0] K0 left", "full[1] K0 right", "full[2] K1 left", "full[3] K1 right",
         "empty[0] K0 left", "empty[1] K0 right", "empty[2] K1 left", "empty[3] K1 right",
         "q_full", "q_empty"]

def main(path, full0):
    rows = list(csv.reader(gzip.open(path, "rt")))
    hdr, data = rows[1], rows[2:]
    ia, isrc = hdr.index("Address"), hdr.index("Source")
    iss = hdr.index("Warp Stall Sampling (All Samples)")
    base = int(data[0][ia], 16)
    recs = [(int(r[ia], 16) - base, r[isrc].strip(), int(r[iss] or 0)) for r in data]
    idx = {a: i for i, (a, _, _) in enumerate(recs)}
    prod = next(a for a, s, _ in recs if "USETMAXREG.DEALLOC" in s)
    last_exit = max(a for a, s, _ in recs if s == "EXIT")
    total = sum(n for _, _, n in recs)
    region = collections.Counter()
    for a, s, n in recs:
        region["retry loops" if a > last_exit else "producer" if a >= prod else "consumer"] += n
    print(f"{path}: {total} samples; " +
          ", ".join(f"{k} {v} ({v / total:.0%})" for k, v in region.items()))
    sites = collections.Counter()
    for i, (a, s, n) in enumerate(recs):
        m = re.search(r"SYNCS\.PHASECHK\.TRANS64\.TRYWAIT (P\d), \[(UR\d+)\]", s)
        if not m or a > last_exit:
            continue
        pred, reg = m.groups()
        off = None
        for j in range(i - 1, max(i - 400, 0), -1):
            mm = re.search(rf"UIADD3 {reg}, UR\d+, (0x[0-9a-f]+), UR\d+", recs[j][1])
            if mm:
                off = int(mm.group(1), 16); break
        br = next((r for r in recs[i + 1:i + 16] if re.match(rf"@!{pred}\s+BRA", r[1])), None)
        if br is None:
            continue
        samples = br[2]
        mt = re.search(r"BRA (0x[0-9a-f]+)", br[1])
        if mt:
            t = idx.get(int(mt.group(1), 16) - base)
            if t is not None:  # the retry loop: until its branch back
                for k in range(t, min(t + 8, len(recs))):
                    samples += recs[k][2]
                    if "BRA" in recs[k][1] and k > t:
                        break
        k = (off - full0) // 8 if off is not None else None
        name = NAMES[k] if k is not None and 0 <= k < len(NAMES) else f"offset {off}"
        who = "producer" if a >= prod else "consumer"
        sites[(who, name)] += samples
    for (who, name), n in sites.most_common():
        print(f"  {who:8s} waits on {name:18s} {n:6d} samples ({n / total:.1%})")
    cols = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    reasons = collections.Counter()
    for (a, _, _), r in zip(recs, data):
        if prod <= a <= last_exit:
            for i in cols:
                reasons[hdr[i][len("stall_"):]] += float(r[i] or 0)
    n = sum(reasons.values())
    print(f"  producer code's stall reasons ({int(n)} samples): " +
          ", ".join(f"{k} {v / n:.0%}" for k, v in reasons.most_common(7)))

if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2], 0))
