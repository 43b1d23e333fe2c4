#!/usr/bin/env python3
"""The decode rows as an engine calls them: ``sparse_mla.flash_mla.flash_mla_with_kvcache``.

Each row of docs/flashmla_baseline.md's decode table (V3.2 h_q 128 topk 2048 at b 2 / 64 / 128;
V4 h_q 64 topk 128 + 512 extra and h_q 128 topk 128 + 1024 extra at b 2 / 64 / 128 / 256; s_q 2)
and the tensor-parallel shards of ../shared/PERFORMANCE.md (V4 h_q 16 / 32 with 1024 extra at b
128 s_q 2; V4 h_q 8 / 16 with 512 extra at s_q 1, b 1 / 12 / 64 / 128; V3.2 h_q 16 at b 1 / 8 s_q 1
and b 64 s_q 2, h_q 8 at b 8; against FlashMLA padded to 64 heads) is timed three ways, the
call's holder filled first (a decode step's later layers). The inputs are shaped as FlashMLA's
own benchmark makes them (``flashmla_cases.py``: each request's cache length about s_k = 16384
tokens on pages of its own, each token's list distinct positions of its request, full lists), so
the times compare with FlashMLA's figures:

- **isolated call**: ``host_time.time_isolated`` (synchronise, then the Python call: host wall;
  a sleep kernel, then CUDA events around the same call: device time; their sum);
- **CUDA graph**: the call captured once, each replay preceded by a write of a 256 MiB buffer
  (outside the events) so that L2 holds none of the call's rows; device time of the replay;
- **eager, L2 flushed**: the same flush, then events around an eager call: what ``sparse-mla
  bench`` measures, through the Python package.

Two equalities per row: the graph's output equals the eager call's bit for bit, and so it does
after q, the index lists and the caches' bytes are rewritten in place with other values (the same
lengths, so the reused schedule stays valid) and the graph replayed: a graph replays the new
inputs. The kernel that ran is the plan's (``sparse_mla.plan_decode``; the Hopper decode runs
where ``cuda::sm90a_decode_by_default`` or ``SMLA_DECODE_SM90A=1`` puts it).

Medians over ``--runs`` calls, microseconds; FlashMLA's H200 time of the row (its own benchmark,
L2 flushed, schedule reused) is the anchor.

    python benchmarks/python/decode_calls.py --json out.json [--runs 30] [--cases a,b]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashmla_cases  # noqa: E402  (decode_inputs)
import host_time  # noqa: E402  (flash_mla_decode_call)
from prefill_calls import engine_timings, row_line, row_options, run_rows  # noqa: E402

import sparse_mla  # noqa: E402
import sparse_mla.flash_mla as smla_flash_mla  # noqa: E402


# Tokens per request of each cache, as the CLI's decode suites (tools/sparse_mla_cli/suites.cpp,
# kDecodeCacheTokens: FlashMLA's V4 rows use s_k 16384; its V3.2 table names none).
S_K = 16384


def _v32(b: int, flashmla: float, h_q: int = 128, s_q: int = 2) -> Dict:
    return dict(fmt="v32_fp8", b=b, s_q=s_q, h_q=h_q, topk=2048, page=64, extra=None, s_k=S_K,
                flashmla=flashmla)


def _v4(h_q: int, b: int, extra_topk: int, flashmla: float, s_q: int = 2) -> Dict:
    return dict(fmt="v4_fp8", b=b, s_q=s_q, h_q=h_q, topk=128, page=256, extra=(extra_topk, 64),
                s_k=S_K, flashmla=flashmla)


# name -> shapes (flashmla_cases.decode_inputs) and FlashMLA's H200 time in us
# (docs/flashmla_baseline.md; the shards: FlashMLA with q and sink zero-padded to 64 heads,
# ../shared/PERFORMANCE.md).
CASES = {
    **{f"v32_h128_b{b}": _v32(b, t) for b, t in ((2, 20.1), (64, 184.5), (128, 361.7))},
    **{f"v4_h64_b{b}": _v4(64, b, 512, t)
       for b, t in ((2, 14.0), (64, 48.6), (128, 90.7), (256, 173.0))},
    **{f"v4_h128_b{b}": _v4(128, b, 1024, t)
       for b, t in ((2, 16.8), (64, 105.2), (128, 204.1), (256, 401.4))},
    "v4_h16_b128_extra1024": _v4(16, 128, 1024, 155.6),
    "v4_h32_b128_extra1024": _v4(32, 128, 1024, 155.6),
    **{f"v4_h8_s1_b{b}": _v4(8, b, 512, t, s_q=1)
       for b, t in ((1, 19.8), (12, 27.8), (64, 53.9), (128, 58.7))},
    **{f"v4_h16_s1_b{b}": _v4(16, b, 512, t, s_q=1)
       for b, t in ((1, 20.0), (12, 28.0), (64, 55.1), (128, 58.9))},
    # V3.2 shards: FlashMLA padded to 64 heads, device time of a graph replay (PERFORMANCE.md's
    # small-heads table; the h16 b 1 goal is <= 10 us).
    "v32_h16_s1_b1": _v32(1, 21.5, h_q=16, s_q=1),
    "v32_h16_s1_b8": _v32(8, 25.6, h_q=16, s_q=1),
    "v32_h8_s1_b8": _v32(8, 26.6, h_q=8, s_q=1),
    "v32_h16_b64": _v32(64, 119.7, h_q=16),
}


def rewrite_inputs(a: Dict, shapes: Dict, seed: int) -> None:
    """Other values in place: q, the caches' bytes and the index lists (the requests' lengths
    and pages unchanged, so the tensors keep their shapes)."""
    fresh = flashmla_cases.decode_inputs(shapes, str(a["q"].device), seed=seed)
    for name in ("q", "kv_cache", "indices", "extra_kv_cache", "extra_indices"):
        if name in a:
            a[name].copy_(fresh[name])


def planned_kernel(a: Dict) -> str:
    kw = {k: a[k] for k in ("topk_length", "attn_sink", "extra_kv_cache", "extra_indices",
                            "extra_topk_length") if k in a}
    return sparse_mla.plan_decode(a["q"], a["kv_cache"], a["indices"], **kw).kernel


def decode_row(opts: argparse.Namespace, name: str, case: Dict) -> Tuple[Dict, str]:
    shapes = {k: v for k, v in case.items() if k != "flashmla"}
    a = flashmla_cases.decode_inputs(shapes, "cuda")
    call = host_time.flash_mla_decode_call(smla_flash_mla, a)
    kernel = planned_kernel(a)

    def checks(graph: torch.cuda.CUDAGraph, captured) -> Dict:
        same = all(bool(torch.equal(c, e)) for c, e in zip(captured, call()))
        rewrite_inputs(a, shapes, seed=7)
        graph.replay()
        torch.cuda.synchronize()
        return dict(graph_output_equals_eager=same,
                    graph_output_equals_eager_after_new_inputs=all(
                        bool(torch.equal(c, e)) for c, e in zip(captured, call())))

    t = engine_timings(call, opts, case["flashmla"], checks)
    row = dict(case=name, **shapes, kernel=kernel, flashmla_us=case["flashmla"], **t)
    return row, (f"{name:24s} {kernel:34s} {row_line(t)} ({t['flashmla_over_graph']}x FlashMLA "
                 f"{case['flashmla']}) graph==eager {t['graph_output_equals_eager']} / new "
                 f"inputs {t['graph_output_equals_eager_after_new_inputs']}")


def main(argv: Optional[List[str]] = None) -> int:
    return run_rows(row_options(__doc__, CASES, argv),
                    "sparse_mla.flash_mla.flash_mla_with_kvcache",
                    "benchmarks/python/decode_calls.py", decode_row)


if __name__ == "__main__":
    sys.exit(main())
