#!/usr/bin/env python3
"""The prefill suite's rows as an engine calls them: ``sparse_mla.flash_mla.flash_mla_sparse_fwd``.

Each row of docs/flashmla_baseline.md's prefill table (V3.2 d_qk 576 h_q 128 topk 2048 at s_kv
8K / 64K / 128K; V4 d_qk 512 h_q 64 topk 512 and h_q 128 topk 1024 at 8K / 64K; the 16 / 32-head
shards of V4 at 64K) is timed three ways:

- **isolated call**: ``host_time.time_isolated`` (synchronise, then the Python call: host wall;
  a sleep kernel, then CUDA events around the same call: device time; their sum);
- **CUDA graph**: the call captured once, each replay preceded by a write of a 256 MiB buffer
  (outside the events) so L2 holds none of the call's rows, device time of the replay by events;
- **eager, L2 flushed**: the same flush, then events around an eager call (queued behind the
  flush, so no host time shows): what ``sparse-mla bench`` measures, through the Python package.

Medians over ``--runs`` calls, microseconds. FlashMLA's H200 time of the row (its own benchmark,
L2 flushed; docs/flashmla_baseline.md) is the anchor; the inputs are shaped as its benchmark
makes them (``flashmla_cases.py``: each token's slots distinct).

    python benchmarks/python/prefill_calls.py --json out.json [--runs 30] [--cases a,b]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashmla_cases  # noqa: E402  (prefill_inputs)
import host_time  # noqa: E402  (time_isolated, write_json)
import sparse_mla.flash_mla as smla_flash_mla  # noqa: E402

# name -> shapes and FlashMLA's H200 time (us, docs/flashmla_baseline.md; the 16 / 32-head rows:
# FlashMLA padded to 64 heads, ~1010 us, the tp-shards anchor).
CASES = {
    "v32_d576_h128_topk2048_skv8k": dict(s_kv=8192, h_q=128, d_qk=576, topk=2048, flashmla=3555),
    "v32_d576_h128_topk2048_skv64k": dict(s_kv=65536, h_q=128, d_qk=576, topk=2048,
                                          flashmla=4016),
    "v32_d576_h128_topk2048_skv128k": dict(s_kv=131072, h_q=128, d_qk=576, topk=2048,
                                           flashmla=4142),
    "v4_d512_h64_topk512_skv8k": dict(s_kv=8192, h_q=64, d_qk=512, topk=512, flashmla=519),
    "v4_d512_h64_topk512_skv64k": dict(s_kv=65536, h_q=64, d_qk=512, topk=512, flashmla=591),
    "v4_d512_h128_topk1024_skv8k": dict(s_kv=8192, h_q=128, d_qk=512, topk=1024, flashmla=1742),
    "v4_d512_h128_topk1024_skv64k": dict(s_kv=65536, h_q=128, d_qk=512, topk=1024,
                                         flashmla=1911),
    "v4_d512_h16_topk1024_skv64k": dict(s_kv=65536, h_q=16, d_qk=512, topk=1024, flashmla=1010),
    "v4_d512_h32_topk1024_skv64k": dict(s_kv=65536, h_q=32, d_qk=512, topk=1024, flashmla=1010),
}
S_Q = 4096
FLUSH_BYTES = 256 << 20


def flushed_device_us(launch: Callable[[], object], flush: torch.Tensor, runs: int) -> float:
    """Median device time of `launch` after an L2 flush each run (events around launch only)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        flush.zero_()
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def capture_graph(call: Callable[[], object]):
    """`call` captured in a CUDA graph after warm-up on a side stream (plan caches, lazy module
    set-up) and replayed once: (graph, the captured call's outputs, refreshed by each replay)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    graph.replay()
    torch.cuda.synchronize()
    return graph, captured


def engine_timings(call: Callable[[], object], opts: argparse.Namespace, flashmla_us: float,
                   checks: Callable[[torch.cuda.CUDAGraph, object], Dict]) -> Dict:
    """A row's three timings (isolated call, eager and graph replay with L2 flushed) and their
    ratios to FlashMLA's time, over opts.runs calls each; `checks(graph, captured outputs)` runs
    between the capture and the graph's timing and adds its fields (the outputs' equalities)."""
    isolated = host_time.time_isolated(call, "cuda", opts.runs, opts.warmup)[0]
    eager_flushed = flushed_device_us(call, opts.flush, opts.runs)
    graph, captured = capture_graph(call)
    checked = checks(graph, captured)
    graph_flushed = flushed_device_us(graph.replay, opts.flush, opts.runs)
    del graph, captured
    return dict(isolated=isolated, eager_l2_flushed_device_us=round(eager_flushed, 2),
                graph_l2_flushed_device_us=round(graph_flushed, 2), **checked,
                flashmla_over_graph=round(flashmla_us / graph_flushed, 3),
                flashmla_over_isolated_sum=round(flashmla_us / isolated["sum_us"], 3))


def row_options(doc: str, cases: Dict, argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line of a rows script (this one, decode_calls.py): --runs, --warmup, --cases
    (checked against `cases`), --json; opts.rows holds the (name, case) pairs to run and
    opts.flush the buffer whose write flushes L2."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    p.add_argument("--json", help="write the results here")
    opts = p.parse_args(argv)
    wanted = set(filter(None, opts.cases.split(",")))
    unknown = wanted - set(cases)
    if unknown:
        p.error(f"--cases: unknown {sorted(unknown)}; known: {', '.join(cases)}")
    if not torch.cuda.is_available():
        p.exit(2, f"{p.prog}: needs a CUDA device\n")
    opts.rows = [(name, case) for name, case in cases.items() if not wanted or name in wanted]
    opts.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    return opts


def row_line(t: Dict) -> str:
    """A row's timings for the console: the isolated call's host, device and sum, then the eager
    and graph device times with L2 flushed (us)."""
    i = t["isolated"]
    return (f"isolated host {i['host_us_median']:8.1f} device {i['device_us_median']:9.1f} sum "
            f"{i['sum_us']:9.1f} | eager flushed {t['eager_l2_flushed_device_us']:9.1f} | graph "
            f"flushed {t['graph_l2_flushed_device_us']:9.1f}")


def run_rows(opts: argparse.Namespace, api: str, script: str,
             row: Callable[[argparse.Namespace, str, Dict], Tuple[Dict, str]]) -> int:
    """Each case of opts.rows through `row(opts, name, case)` -> (its results, its console
    line), the allocator's cache emptied between rows; the rows into opts.json when given, saying
    what was timed (`api`'s calls, three ways)."""
    results: List[Dict] = []
    for name, case in opts.rows:
        result, line = row(opts, name, case)
        results.append(result)
        print(line, flush=True)
        torch.cuda.empty_cache()
    if opts.json:
        host_time.write_json(opts.json, f"rows through {api}: isolated calls, CUDA-graph replay "
                             f"and eager calls with L2 flushed ({script})", results,
                             device=torch.cuda.get_device_name())
    return 0


def prefill_row(opts: argparse.Namespace, name: str, case: Dict) -> Tuple[Dict, str]:
    shapes = dict(s_q=S_Q, **{k: v for k, v in case.items() if k != "flashmla"})
    a = flashmla_cases.prefill_inputs(shapes, "cuda")
    call = host_time.prefill_call(smla_flash_mla, a)
    t = engine_timings(call, opts, case["flashmla"],
                       lambda graph, captured: dict(
                           graph_output_equals_eager=bool(torch.equal(captured[0], call()[0]))))
    flops = 2.0 * S_Q * case["h_q"] * case["topk"] * (case["d_qk"] + 512)
    row = dict(case=name, **shapes, flashmla_us=case["flashmla"], **t,
               graph_tflops=round(flops / t["graph_l2_flushed_device_us"] / 1e6, 1))
    return row, (f"{name:34s} {row_line(t)} ({row['graph_tflops']} TFLOP/s, "
                 f"{row['flashmla_over_graph']}x FlashMLA {case['flashmla']}) graph==eager "
                 f"{t['graph_output_equals_eager']}")


def main(argv: Optional[List[str]] = None) -> int:
    return run_rows(row_options(__doc__, CASES, argv), "sparse_mla.flash_mla.flash_mla_sparse_fwd",
                    "benchmarks/python/prefill_calls.py", prefill_row)


if __name__ == "__main__":
    sys.exit(main())
