#!/usr/bin/env python3
"""Host time per call through the Python package, timed as isolated calls.

An engine that does not capture its decode step in a CUDA graph pays the host time of every call
(per layer). Runs queued back to back hide it, so each call here is timed alone:

- host wall per call: synchronise, then ``time.perf_counter_ns`` around the Python call (call to
  return);
- device time per call: synchronise, queue a sleep kernel long enough to cover the launches,
  then CUDA events around the same call, so the events measure the call's kernels only (0 on the
  CPU, where the host wall includes the computation);
- their sum: the latency of one isolated call when host work and kernels do not overlap.

Cases (FlashMLA-compatible calls, ``sparse_mla.flash_mla``): decode V3.2 h_q 128 topk 2048
b 2 s_q 2; V4 h_q 64 main topk 128 (page 256) + extra topk 512 (page 64) at b 2 and b 128 s_q 2;
V4 h_q 16 (same lists) b 128 s_q 1; V4.1 (v41_fp8 + v41_fp4 caches, V4's lists) h_q 64 b 2
s_q 2; prefill ``flash_mla_sparse_fwd`` d_qk 512 h_q 64 topk 512;
plus ``sparse_mla.sparse_decode`` with a plan made once and its schedule reused. Decode calls
after the first reuse the scheduling holder (every layer after the first of a decode step).
With ``--compare`` the same calls go through FlashMLA's own ``flash_mla`` module when it
imports (CUDA only).

``--dispatcher-too`` times every sparse_mla call a second time with the eager-call module
switched off (every operator through ``torch.ops``, as a build without Python's headers runs),
the two paths taking turns call by call: what the module buys on this machine.

``--small`` shrinks every case (heads, lists, batch) for a quick run on the CPU back end.

    python benchmarks/python/host_time.py --device cuda --json out.json
    python benchmarks/python/host_time.py --device cpu --small --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

import sparse_mla
import sparse_mla.flash_mla as smla_flash_mla

# name -> shapes. decode: format, b, s_q, h_q, topk, page, extra (topk, page) or None.
DECODE_CASES = {
    "decode_v32_h128_b2_s2": dict(fmt="v32_fp8", b=2, s_q=2, h_q=128, topk=2048, page=64,
                                  extra=None),
    "decode_v4_h64_b2_s2": dict(fmt="v4_fp8", b=2, s_q=2, h_q=64, topk=128, page=256,
                                extra=(512, 64)),
    "decode_v4_h64_b128_s2": dict(fmt="v4_fp8", b=128, s_q=2, h_q=64, topk=128, page=256,
                                  extra=(512, 64)),
    "decode_v4_h16_b128_s1": dict(fmt="v4_fp8", b=128, s_q=1, h_q=16, topk=128, page=256,
                                  extra=(512, 64)),
    # DeepSeek V4.1: a v41_fp8 window cache with a v41_fp4 compressed cache (formats inferred
    # from the bytes per token, the default page_split layout).
    "decode_v41_h64_b2_s2": dict(fmt="v41_fp8", b=2, s_q=2, h_q=64, topk=128, page=256,
                                 extra=(512, 64), extra_fmt="v41_fp4"),
}
PREFILL_CASE = dict(s_q=4096, s_kv=8192, h_q=64, d_qk=512, topk=512)


def shrink(case: Dict) -> Dict:
    """The --small version of a case: few heads, short lists, small batch."""
    small = dict(case)
    if "fmt" in case:
        small.update(b=min(case["b"], 2), h_q=min(case["h_q"], 4), topk=min(case["topk"], 32),
                     page=min(case["page"], 16))
        if case["extra"] is not None:
            small["extra"] = (32, 8)
    else:
        small.update(s_q=4, s_kv=256, h_q=4, topk=32)
    return small


def _rows(gen, n: int, d_qk: int, device) -> torch.Tensor:
    return (torch.randn(n, d_qk, generator=gen) / 10).to(torch.bfloat16).to(device)


def make_cache(gen, fmt: str, num_blocks: int, page: int, device) -> torch.Tensor:
    d_qk = sparse_mla.kv_cache_format(fmt).d_qk
    rows = (torch.randn(num_blocks, page, 1, d_qk, generator=gen) / 10).to(torch.bfloat16)
    return sparse_mla.quantize_kv_cache(rows, fmt).to(device) if device == "cpu" else \
        sparse_mla.quantize_kv_cache(rows.to(device), fmt)


def decode_inputs(case: Dict, device: str, seed: int = 0) -> Dict:
    """Random q, caches twice the size the lists need, random valid slots, full lengths."""
    gen = torch.Generator().manual_seed(seed)
    fmt, b, s_q, h_q, topk, page = (case[k] for k in ("fmt", "b", "s_q", "h_q", "topk", "page"))
    d_qk = sparse_mla.kv_cache_format(fmt).d_qk

    def one(count, pbs, cache_fmt):
        blocks = max(1, -(-2 * count // pbs))
        cache = make_cache(gen, cache_fmt, blocks, pbs, device)
        slots = torch.randint(0, blocks * pbs, (b, s_q, count), generator=gen,
                              dtype=torch.int32).to(device)
        lengths = torch.full((b,), count, dtype=torch.int32, device=device)
        return cache, slots, lengths

    q = (torch.randn(b, s_q, h_q, d_qk, generator=gen) / 10).to(torch.bfloat16).to(device)
    cache, slots, lengths = one(topk, page, fmt)
    args = dict(q=q, kv_cache=cache, indices=slots, topk_length=lengths,
                attn_sink=torch.randn(h_q, generator=gen).to(device))
    if case["extra"] is not None:
        e_cache, e_slots, e_lengths = one(*case["extra"], case.get("extra_fmt", fmt))
        args.update(extra_kv_cache=e_cache, extra_indices=e_slots, extra_topk_length=e_lengths)
    return args


def prefill_inputs(case: Dict, device: str, seed: int = 1) -> Dict:
    gen = torch.Generator().manual_seed(seed)
    s_q, s_kv, h_q, d_qk, topk = (case[k] for k in ("s_q", "s_kv", "h_q", "d_qk", "topk"))
    q = (torch.randn(s_q, h_q, d_qk, generator=gen) / 10).to(torch.bfloat16).to(device)
    kv = (torch.randn(s_kv, 1, d_qk, generator=gen) / 10).to(torch.bfloat16).to(device)
    indices = torch.randint(0, s_kv, (s_q, 1, topk), generator=gen, dtype=torch.int32).to(device)
    return dict(q=q, kv=kv, indices=indices, sm_scale=d_qk ** -0.5)


def flash_mla_decode_call(module, a: Dict) -> Callable[[], object]:
    """One flash_mla_with_kvcache call of a decode step's later layers (holder filled)."""
    meta, _ = module.get_mla_metadata()

    def call():
        return module.flash_mla_with_kvcache(
            a["q"], a["kv_cache"], None, None, 512, meta, is_fp8_kvcache=True,
            indices=a["indices"], attn_sink=a["attn_sink"], extra_k_cache=a.get("extra_kv_cache"),
            extra_indices_in_kvcache=a.get("extra_indices"), topk_length=a.get("topk_length"),
            extra_topk_length=a.get("extra_topk_length"))
    call()  # fills the holder (plan + schedule)
    return call


def sparse_decode_call(a: Dict) -> Callable[[], object]:
    """sparse_mla.sparse_decode with a plan made once and its schedule reused."""
    kw = {k: v for k, v in a.items() if k not in ("q", "kv_cache", "indices")}
    plan = sparse_mla.plan_decode(a["q"], a["kv_cache"], a["indices"], **kw)
    sparse_mla.sparse_decode(a["q"], a["kv_cache"], a["indices"], plan=plan, **kw)

    def call():
        return sparse_mla.sparse_decode(a["q"], a["kv_cache"], a["indices"], plan=plan,
                                        reuse_schedule=True, **kw)
    return call


def prefill_call(module, a: Dict) -> Callable[[], object]:
    def call():
        return module.flash_mla_sparse_fwd(a["q"], a["kv"], a["indices"], a["sm_scale"])
    return call


def time_isolated(call: Callable[[], object], device: str, runs: int, warmup: int,
                  prepare: Optional[List[Callable[[], None]]] = None) -> List[Dict]:
    """Median host wall, device time and their sum over `runs` isolated calls (microseconds).

    With ``prepare`` (one function per variant, e.g. switching a code path on or off) the
    variants take turns call by call, so a machine whose speed drifts during the run weighs on
    each of them alike; one result per variant."""
    variants = prepare or [lambda: None]
    cuda = device.startswith("cuda")
    for setup in variants:
        setup()
        for _ in range(warmup):
            call()
    if cuda:
        torch.cuda.synchronize()
    host: List[List[float]] = [[] for _ in variants]
    dev: List[List[float]] = [[] for _ in variants]
    for _ in range(runs):
        for v, setup in enumerate(variants):
            setup()
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            call()
            t1 = time.perf_counter_ns()
            host[v].append((t1 - t0) / 1e3)
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(runs):
            for v, setup in enumerate(variants):
                setup()
                torch.cuda.synchronize()
                torch.cuda._sleep(2_000_000)  # ~1 ms of GPU time: the launches queue behind it
                start.record()
                call()
                end.record()
                end.synchronize()
                dev[v].append(start.elapsed_time(end) * 1e3)
    results = []
    for h, d in zip(host, dev):
        host_med = statistics.median(h)
        dev_med = statistics.median(d) if d else None
        results.append(dict(runs=runs, host_us_median=round(host_med, 2),
                            host_us_min=round(min(h), 2),
                            device_us_median=None if dev_med is None else round(dev_med, 2),
                            sum_us=round(host_med + (dev_med or 0.0), 2)))
    return results


def commit() -> Dict:
    """The tree's commit; SMLA_COMMIT wins (a copy of the tree on another machine has no git)."""
    if os.environ.get("SMLA_COMMIT"):
        return dict(commit=os.environ["SMLA_COMMIT"], git_dirty=None)

    def git(*cmd):
        try:
            return subprocess.run(["git", *cmd], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None
    return dict(commit=git("rev-parse", "HEAD"), git_dirty=bool(git("status", "--porcelain")))


def write_json(path: str, what: str, results: List[Dict], **fields) -> None:
    """A results document at `path`: what was measured, the command, date, machine, Python and
    torch versions, `fields`, the tree's commit, then the results (used by prefill_calls.py)."""
    doc = dict(what=what, command=" ".join([sys.executable, *sys.argv]),
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               machine=platform.node(), python=platform.python_version(), torch=torch.__version__,
               **fields, **commit(), results=results)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny shapes (quick CPU run)")
    p.add_argument("--runs", type=int, default=50, help="timed calls per case (>= 30)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    p.add_argument("--compare", action="store_true",
                   help="also time FlashMLA's own flash_mla module when it imports")
    p.add_argument("--dispatcher-too", action="store_true",
                   help="also time each sparse_mla call through torch.ops (eager module off)")
    p.add_argument("--json", help="write the results here")
    opts = p.parse_args(argv)
    if opts.runs < 30:
        p.error(f"--runs = {opts.runs}: the median needs >= 30 calls")
    if opts.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda but torch sees no CUDA device")

    modules = {"sparse_mla": smla_flash_mla}
    if opts.compare and opts.device.startswith("cuda"):
        try:
            import flash_mla  # noqa: F401  (FlashMLA's package)
            modules["flash_mla"] = flash_mla
        except ImportError as error:
            print(f"host_time: flash_mla does not import ({error}); timing sparse_mla only")
    wanted = set(filter(None, opts.cases.split(",")))
    results = []

    switches = ("_EAGER_PREFILL_ALLOC", "_EAGER_PREFILL", "_EAGER_DECODE_ALLOC", "_EAGER_DECODE")
    eager = {name: getattr(sparse_mla.ops, name) for name in switches}

    def use_eager(on: bool) -> Callable[[], None]:
        def setup():
            for name, function in eager.items():
                setattr(sparse_mla.ops, name, function if on else None)
        return setup

    both = opts.dispatcher_too and eager["_EAGER_DECODE_ALLOC"] is not None

    def run(name: str, api: str, call: Callable[[], object], shapes: Dict):
        if wanted and name not in wanted:
            return
        paths = ["eager", "torch.ops"] if both and api.startswith("sparse_mla") else [None]
        prepare = [use_eager(p != "torch.ops") for p in paths]
        timed = time_isolated(call, opts.device, opts.runs, opts.warmup, prepare)
        use_eager(True)()
        for path, r in zip(paths, timed):
            label = api if path is None else f"{api} [{path}]"
            r.update(case=name, api=label, shapes=shapes)
            results.append(r)
            dev = "na" if r["device_us_median"] is None else f'{r["device_us_median"]:.1f}'
            print(f"{name:28s} {label:46s} host {r['host_us_median']:8.1f} us  device "
                  f"{dev:>8s} us  sum {r['sum_us']:8.1f} us")

    for name, case in DECODE_CASES.items():
        if wanted and name not in wanted and name + "_plan" not in wanted:
            continue
        case = shrink(case) if opts.small else case
        a = decode_inputs(case, opts.device)
        for label, module in modules.items():
            run(name, f"{label}.flash_mla_with_kvcache", flash_mla_decode_call(module, a), case)
        run(name + "_plan", "sparse_mla.sparse_decode(plan)", sparse_decode_call(a), case)
    case = shrink(PREFILL_CASE) if opts.small else PREFILL_CASE
    a = prefill_inputs(case, opts.device)
    for label, module in modules.items():
        run("prefill_d512_h64_topk512", f"{label}.flash_mla_sparse_fwd", prefill_call(module, a),
            case)

    if opts.json:
        write_json(opts.json, "host wall / device time per isolated call through the Python "
                   "package (benchmarks/python/host_time.py)", results,
                   device=opts.device if not opts.device.startswith("cuda")
                   else torch.cuda.get_device_name(), small=opts.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
