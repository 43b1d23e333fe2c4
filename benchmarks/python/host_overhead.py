#!/usr/bin/env python3
"""Per-call host overhead of the Python package without any kernel work: calls with b = 0 (decode)
or s_q = 0 (prefill) run everything a call does — Python wrapper, operator dispatch, views,
validation, planning, output allocation — and return before a kernel would start. The overhead
is mostly independent of the back end, so it is measured on the CPU, where no GPU is needed.

Also times the pieces a call is made of (raw operator calls, torch.empty, torch.ops attribute
lookup), to show where the time goes. Each figure is the smallest of --rounds medians of --calls
calls, the cases taking turns round by round: on a shared machine the load changes within
seconds, and the quietest round is the one that shows the code's cost.

    python benchmarks/python/host_overhead.py --json out.json [--label NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_time  # noqa: E402  (the cases' input makers)

import sparse_mla  # noqa: E402
import sparse_mla.flash_mla as flash_mla  # noqa: E402


def median_us(call, calls: int) -> float:
    """Median over `calls` calls (after a warm-up), in microseconds."""
    for _ in range(min(calls // 10, 200)):
        call()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--label", default="")
    p.add_argument("--json")
    opts = p.parse_args()

    case = dict(fmt="v4_fp8", b=1, s_q=2, h_q=64, topk=128, page=256, extra=(512, 64))
    a = host_time.decode_inputs(case, "cpu")
    for k in ("q", "indices", "topk_length", "extra_indices", "extra_topk_length"):
        a[k] = a[k][:0]  # b = 0
    kw = {k: v for k, v in a.items() if k not in ("q", "kv_cache", "indices")}
    pa = host_time.prefill_inputs(dict(s_q=0, s_kv=64, h_q=64, d_qk=512, topk=512), "cpu")
    out = torch.empty(0, 2, 64, 512, dtype=torch.bfloat16)
    lse = torch.empty(0, 2, 64)
    op = torch.ops.sparse_mla.sparse_decode.default
    plan = sparse_mla.plan_decode(a["q"], a["kv_cache"], a["indices"], **kw)

    times = {
        "flash_mla_with_kvcache (holder filled)": host_time.flash_mla_decode_call(flash_mla, a),
        "sparse_decode(plan, reuse_schedule)": host_time.sparse_decode_call(a),
        "sparse_decode(no plan)": lambda: sparse_mla.sparse_decode(
            a["q"], a["kv_cache"], a["indices"], **kw),
        "flash_mla_sparse_fwd": host_time.prefill_call(flash_mla, pa),
        "piece: torch.ops.sparse_mla.sparse_decode.default, outputs given": lambda: op(
            a["q"], a["kv_cache"], a["indices"], a["topk_length"], a["attn_sink"],
            a["extra_kv_cache"], a["extra_indices"], a["extra_topk_length"], None, None, 512,
            None, False, out, lse),
        "piece: torch.ops.sparse_mla.plan_decode.default": lambda: torch.ops.sparse_mla.
        plan_decode.default(a["q"], a["kv_cache"], a["indices"], a["topk_length"],
                            a["attn_sink"], a["extra_kv_cache"], a["extra_indices"],
                            a["extra_topk_length"], None, 512),
        "piece: two torch.empty (decode out + lse)": lambda: (
            torch.empty((0, 2, 64, 512), dtype=torch.bfloat16),
            torch.empty((0, 2, 64), dtype=torch.float32)),
        "piece: torch.ops.sparse_mla.sparse_decode attribute chain": lambda: torch.ops.
        sparse_mla.sparse_decode.default,
    }
    # The per-call Python work that host_time's results table attributes (b9dcd62's code, written
    # out here, against what replaced it).
    names = ("q", "kv_cache", "indices", "topk_length", "attn_sink", "extra_kv_cache",
             "extra_indices", "extra_topk_length")
    planned = [a.get(n) for n in names]
    shapes = {n: None if t is None else tuple(t.shape) for n, t in zip(names, planned)}

    def shape_dict_check():
        got = {n: None if t is None else tuple(t.shape) for n, t in zip(names, planned)}
        for n, shape in got.items():
            if shape != shapes[n]:
                raise AssertionError(n)

    key = tuple(None if t is None else t.shape for t in planned)

    def shape_key_check():
        if tuple(None if t is None else t.shape for t in planned) != key:
            raise AssertionError("key")

    times["piece: plan check as a dict of shapes per call (b9dcd62)"] = shape_dict_check
    times["piece: plan check as one tuple of shapes"] = shape_key_check
    config_type = flash_mla.FlashMLASchedMeta.Config
    q, cache, idx = a["q"], a["kv_cache"], a["indices"]
    extra, e_idx = a["extra_kv_cache"], a["extra_indices"]
    held = config_type(q.shape[0], q.shape[1], q.shape[2], cache.shape[1], cache.shape[2], False,
                       True, idx.shape[-1], extra.shape[1], e_idx.shape[-1])

    def config_check():
        fmt = sparse_mla.infer_kv_cache_format(cache)
        want = config_type(q.shape[0], q.shape[1], q.shape[2], cache.shape[1], cache.shape[2],
                           False, True, idx.shape[-1], extra.shape[1], e_idx.shape[-1])
        dict(topk_length=a["topk_length"], attn_sink=a["attn_sink"], extra_kv_cache=extra,
             extra_indices=e_idx, extra_topk_length=a["extra_topk_length"], kv_format=fmt,
             d_v=512)
        for field in dataclasses.fields(want):
            if getattr(held, field.name) != getattr(want, field.name):
                raise AssertionError(field.name)

    times["piece: FlashMLA holder check: format, Config, _check_config, dict (b9dcd62)"] = \
        config_check
    if hasattr(torch.ops.sparse_mla, "sparse_decode_alloc"):
        alloc = torch.ops.sparse_mla.sparse_decode_alloc.default
        times["piece: torch.ops.sparse_mla.sparse_decode_alloc.default"] = lambda: alloc(
            a["q"], a["kv_cache"], a["indices"], a["topk_length"], a["attn_sink"],
            a["extra_kv_cache"], a["extra_indices"], a["extra_topk_length"], None, None, 512,
            plan.workspace, False)
    eager = sparse_mla.ops._EAGER_DECODE_ALLOC
    if eager is not None:  # the same operator without the dispatcher (python/csrc/eager_calls.cpp)
        times["piece: _sparse_mla_eager.sparse_decode_alloc"] = lambda: eager(
            a["q"], a["kv_cache"], a["indices"], a["topk_length"], a["attn_sink"],
            a["extra_kv_cache"], a["extra_indices"], a["extra_topk_length"], None, None, 512,
            plan.workspace, False, None, None, None)
        times["piece: _sparse_mla_eager.sparse_decode, outputs given"] = lambda: sparse_mla.ops.\
            _EAGER_DECODE(a["q"], a["kv_cache"], a["indices"], a["topk_length"], a["attn_sink"],
                          a["extra_kv_cache"], a["extra_indices"], a["extra_topk_length"], None,
                          None, 512, None, False, out, lse, None, None, None)
    rounds = {name: [] for name in times}
    for _ in range(opts.rounds):
        for name, call in times.items():
            rounds[name].append(median_us(call, opts.calls))
    results = {name: round(min(r), 2) for name, r in rounds.items()}
    for name, value in results.items():
        print(f"{name:66s} {value:7.2f} us")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(dict(label=opts.label, calls=opts.calls, rounds=opts.rounds,
                           torch=torch.__version__,
                           sparse_mla=os.path.dirname(sparse_mla.__file__),
                           median_us=results), f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
