#!/usr/bin/env python3
"""One DeepSeek V4 attention layer stack sharded by heads (tensor parallelism) with sparse_mla.

    torchrun --nproc_per_node=N examples/tensor_parallel.py [--device cpu|cuda] [--heads 64|128]
        [--layers L] [--steps S] [--json PATH]

Every rank holds the whole (single-head, h_kv = 1) KV and its own slice of the query heads,
heads [rank*h/N, (rank+1)*h/N), with the matching slice of each layer's attention sink. It runs

- the sparse prefill of every layer (``sparse_mla.sparse_prefill``, d_qk = d_v = 512, V4 topk:
  512 for Flash's 64 heads, 1024 for Pro's 128), and
- S decode steps over a ``v4_fp8`` main (sliding-window) cache, page 256, topk 128, plus a
  ``v4_fp8`` extra (compressed) cache, page 64, topk 512 (Flash) or 1024 (Pro), in one softmax:
  each step plans once (``sparse_mla.plan_decode``) and every layer's ``sparse_mla.sparse_decode``
  reuses the schedule. On CUDA the step (all layers) is captured in a CUDA graph and replayed;
  the plan (shapes only) is made before the capture and the graph's first layer rebuilds the
  schedule on the device from that step's topk lengths.

The ranks all-gather their heads with ``torch.distributed`` (gloo on CPU, nccl on CUDA, with
NCCL_NVLS_ENABLE=0 unless set) and rank 0 checks the gathered prefill and decode outputs against
a single-process run of all heads on its device, with SPEC §5's tolerances, and a sample of them
against the float64 reference (``sparse_mla.reference``). It prints each rank's times and the
speed-up over one device (the all-heads time over the slowest rank's), and with ``--json`` writes
them to a file. The exit status is 0 only when every check passed.

``--shards K`` splits the heads into K shards with fewer processes (K a multiple of the process
count): a process runs its shards one after the other, so one GPU measures the per-GPU time of a
K-way split (``python examples/tensor_parallel.py --shards 2`` needs no torchrun).

Synthetic data after SPEC §5's recipe (q, KV ~ randn/10 + offset, decode q clamped to ±1), drawn
from one seed on the CPU so every rank holds the same. To keep the set-up short all layers share
one prefill KV and one pair of decode caches; each layer has its own queries, index lists and
sinks.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

import sparse_mla
from sparse_mla.reference import sparse_decode_reference, sparse_prefill_reference

D_QK = D_V = 512
SCALE = D_QK ** -0.5
WINDOW = 128  # sliding-window (main cache) topk
MAIN_PAGE = 256
EXTRA_PAGE = 64
FORMAT = "v4_fp8"

# DeepSeek V4 (SPEC §1): heads -> (model, prefill topk, compressed topk).
MODELS = {64: ("DeepSeek V4 Flash", 512, 512), 128: ("DeepSeek V4 Pro", 1024, 1024)}

# SPEC §5 tolerances: (abs_tol, rel_tol, cos_tol); cos_tol 0 = not checked.
PREFILL_OUT = (8e-4, 3 / 128, 7e-6)
PREFILL_STATS = (1e-6, 2 / 65536, 0.0)
DECODE_OUT = (1e-3, 2 / 128, 5e-6)
DECODE_LSE = (1e-6, 8 / 65536, 0.0)


# ---- arguments ---------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="DeepSeek V4 sparse attention sharded by heads over torch.distributed ranks",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="back end (default: cuda when torch sees a GPU, else cpu)")
    p.add_argument("--heads", type=int, default=64,
                   help="query heads of the whole layer: 64 (V4 Flash) or 128 (V4 Pro)")
    p.add_argument("--shards", type=int, default=None,
                   help="head shards (default: the process count; a multiple of it)")
    p.add_argument("--layers", type=int, default=None, help="layers (default 4 cuda, 2 cpu)")
    p.add_argument("--steps", type=int, default=None, help="decode steps (default 8 cuda, 2 cpu)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed runs of the prefill and of each decode step (default 10 cuda, "
                        "1 cpu)")
    p.add_argument("--prefill-tokens", type=int, default=None,
                   help="prefill query tokens (default 4096 cuda, 64 cpu)")
    p.add_argument("--prefill-context", type=int, default=None,
                   help="prefill KV tokens (default 65536 cuda, 2048 cpu)")
    p.add_argument("--prefill-topk", type=int, default=None,
                   help="prefill topk (default per model: 512 Flash, 1024 Pro)")
    p.add_argument("--batch", type=int, default=None,
                   help="decode requests (default 64 cuda, 4 cpu)")
    p.add_argument("--decode-tokens", type=int, default=1,
                   help="query tokens per request and step (2..4 with MTP)")
    p.add_argument("--extra-context", type=int, default=None,
                   help="compressed-cache tokens per request (default 16384 cuda, 1024 cpu)")
    p.add_argument("--extra-topk", type=int, default=None,
                   help="compressed-cache topk (default per model: 512 Flash, 1024 Pro)")
    p.add_argument("--no-graph", action="store_true",
                   help="on CUDA, run decode steps eagerly instead of replaying a CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", default=None,
                   help="rank 0 writes the configuration, per-rank times and checks here")
    p.add_argument("--fault", choices=("none", "sink-slice"), default="none",
                   help="for testing the check: 'sink-slice' gives every shard the attention "
                        "sink of the next shard's heads (the check must then fail)")
    args = p.parse_args(argv)

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = args.device == "cuda"
    model = MODELS[64] if args.heads <= 64 else MODELS[128]
    defaults = dict(layers=(4, 2), steps=(8, 2), repeats=(10, 1), prefill_tokens=(4096, 64),
                    prefill_context=(65536, 2048), batch=(64, 4), extra_context=(16384, 1024))
    for name, (on_cuda, on_cpu) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, on_cuda if cuda else on_cpu)
    args.model = model[0] if args.heads in MODELS else f"DeepSeek V4 ({args.heads} heads)"
    if args.prefill_topk is None:
        args.prefill_topk = model[1]
    if args.extra_topk is None:
        args.extra_topk = model[2]

    def need(ok: bool, message: str) -> None:
        if not ok:
            p.error(message)

    need(1 <= args.heads <= 128, f"--heads = {args.heads} must be in 1..128")
    for name in ("layers", "steps", "repeats", "prefill_tokens", "prefill_context",
                 "prefill_topk", "batch", "decode_tokens", "extra_context", "extra_topk"):
        need(getattr(args, name) >= 1,
             f"--{name.replace('_', '-')} = {getattr(args, name)} must be >= 1")
    need(args.prefill_context >= args.prefill_tokens,
         f"--prefill-context = {args.prefill_context} must be >= --prefill-tokens = "
         f"{args.prefill_tokens} (the prefill tokens are the context's last ones)")
    need(args.extra_context >= args.extra_topk,
         f"--extra-context = {args.extra_context} must be >= --extra-topk = {args.extra_topk}")
    if cuda and not torch.cuda.is_available():
        p.error("--device = cuda but torch sees no CUDA device")
    return args


# ---- distributed set-up ------------------------------------------------------------------------


@dataclasses.dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    backend: Optional[str]  # None: one process, no process group
    device: torch.device


def init_dist(args: argparse.Namespace) -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        count = torch.cuda.device_count()
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        if local_world > count:
            raise SystemExit(
                f"tensor_parallel: --device cuda needs one GPU per process: {local_world} "
                f"processes on this node, {count} GPU(s) visible; run fewer processes and "
                f"split the heads further with --shards")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = None
    if world > 1:
        backend = "nccl" if args.device == "cuda" else "gloo"
        if backend == "nccl":
            # NVLink multicast (NVLS) off: it is not needed for an all-gather of this size and
            # is refused on some shared machines.
            os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
            dist.init_process_group(backend, device_id=device)
        else:
            dist.init_process_group(backend)
    return Dist(rank, world, local_rank, backend, device)


def gather_heads(t: torch.Tensor, dim: int, d: Dist) -> torch.Tensor:
    """Concatenates every rank's ``t`` along ``dim`` (ranks in order; equal shapes)."""
    if d.world == 1:
        return t
    t = t.contiguous()
    # The bytes travel as uint8, which every back end gathers (gloo has no bf16 or int16), and
    # a gather does not look at the values.
    wire = t.view(torch.uint8)
    parts = [torch.empty_like(wire) for _ in range(d.world)]
    dist.all_gather(parts, wire)
    return torch.cat([part.view(t.dtype) for part in parts], dim=dim)


def barrier(d: Dist) -> None:
    if d.world > 1:
        dist.barrier()


# ---- the problem -------------------------------------------------------------------------------


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """SPEC §5 recipe: randn/10 plus a random per-tensor offset."""
    offset = torch.randn((), generator=gen) / 10
    return torch.randn(*shape, generator=gen) / 10 + offset


def _cache(gen: torch.Generator, num_blocks: int, page: int, device: torch.device):
    """A ``v4_fp8`` cache of random rows, quantized by the library's codec, on ``device``.

    Returns ``(cache, flat)``: the ``[num_blocks, page, 1, 584]`` view (block stride 576-aligned)
    and its whole storage as ``[num_blocks, block_stride]`` bytes.
    """
    rows = _randn(gen, num_blocks, page, 1, D_QK).to(torch.bfloat16)
    host = sparse_mla.quantize_kv_cache(rows, FORMAT)
    stride = host.stride(0)
    flat = host.as_strided((num_blocks, stride), (stride, 1)).to(device)
    return flat.as_strided(host.shape, host.stride()), flat


@dataclasses.dataclass
class Problem:
    """Every input of every layer and step, the same on every rank (all heads)."""

    sinks: List[torch.Tensor]  # [layers] of [h] fp32
    # prefill
    kv: torch.Tensor  # [s_kv, 1, 512] bf16
    prefill_q: List[torch.Tensor]  # [layers] of [s_q, h, 512]
    prefill_indices: List[torch.Tensor]  # [layers] of [s_q, 1, topk] int32
    prefill_lengths: torch.Tensor  # [s_q] int32
    # decode
    main_cache: torch.Tensor
    main_flat: torch.Tensor
    extra_cache: torch.Tensor
    extra_flat: torch.Tensor
    main_table: torch.Tensor  # [b, blocks] int64 physical block of each request's ring block
    extra_table: torch.Tensor  # [b, blocks]
    decode_q: List[List[torch.Tensor]]  # [steps][layers] of [b, s_q, h, 512]
    main_indices: List[torch.Tensor]  # [steps] of [b, s_q, 128] int32
    main_lengths: List[torch.Tensor]  # [steps] of [b, s_q] int32
    extra_indices: List[List[torch.Tensor]]  # [steps][layers] of [b, s_q, extra_topk] int32
    extra_lengths: torch.Tensor  # [b] int32


def make_problem(args: argparse.Namespace, device: torch.device) -> Problem:
    gen = torch.Generator().manual_seed(args.seed)
    h, layers = args.heads, args.layers
    # Sinks around the log of the keys a query sees, so that they change the output visibly
    # (a sink far below the lse would leave it unchanged and a wrong sink slice unnoticed).
    sinks = [math.log(args.extra_topk + WINDOW) + 2 * torch.randn(h, generator=gen)
             for _ in range(layers)]

    # Prefill: query i is token s_kv - s_q + i of the context and picks topk of the tokens up to
    # itself (duplicates allowed, as an indexer's list may have them; SPEC §2 counts each).
    s_q, s_kv, topk = args.prefill_tokens, args.prefill_context, args.prefill_topk
    kv = _randn(gen, s_kv, 1, D_QK).to(torch.bfloat16)
    visible = torch.arange(s_kv - s_q, s_kv) + 1  # [s_q] tokens up to and including itself
    prefill_q, prefill_indices = [], []
    for _ in range(layers):
        prefill_q.append(_randn(gen, s_q, h, D_QK).to(torch.bfloat16))
        pick = (torch.rand(s_q, topk, generator=gen) * visible[:, None]).long()
        prefill_indices.append(pick.to(torch.int32)[:, None, :])
    prefill_lengths = visible.clamp(max=topk).to(torch.int32)

    # Decode. Request r owns a ring of main-cache blocks (its last WINDOW tokens live there) and
    # extra_context // page compressed-cache blocks; physical blocks are shuffled across
    # requests. A quarter of the requests are short (fewer tokens than either topk).
    b, t = args.batch, args.decode_tokens
    main_blocks = -(-(WINDOW + t) // MAIN_PAGE) + 1  # a ring that holds any window of a step
    ring = main_blocks * MAIN_PAGE
    extra_blocks = -(-args.extra_context // EXTRA_PAGE)
    main_table = torch.randperm(b * main_blocks, generator=gen).view(b, main_blocks)
    extra_table = torch.randperm(b * extra_blocks, generator=gen).view(b, extra_blocks)
    main_cache, main_flat = _cache(gen, b * main_blocks, MAIN_PAGE, device)
    extra_cache, extra_flat = _cache(gen, b * extra_blocks, EXTRA_PAGE, device)
    short = torch.arange(b) % 4 == 0
    length = torch.where(short, torch.randint(1, WINDOW, (b,), generator=gen),
                         torch.randint(WINDOW, 65536, (b,), generator=gen))
    compressed = torch.where(
        short, torch.randint(1, args.extra_topk + 1, (b,), generator=gen),
        torch.randint(args.extra_topk, args.extra_context + 1, (b,), generator=gen))
    extra_lengths = compressed.clamp(max=args.extra_topk).to(torch.int32)

    def physical(table: torch.Tensor, pos: torch.Tensor, page: int, valid: torch.Tensor):
        block = table.gather(1, (pos // page).flatten(1)).view(pos.shape)
        return torch.where(valid, block * page + pos % page, -1).to(torch.int32)

    decode_q, main_indices, main_lengths, extra_indices = [], [], [], []
    for step in range(args.steps):
        # Token j of request r sees its last min(WINDOW, end) tokens, end = its position + 1.
        end = (length + step * t)[:, None] + torch.arange(t)[None, :] + 1  # [b, t]
        seen = end.clamp(max=WINDOW)
        k = torch.arange(WINDOW)[None, None, :]
        pos = (end - seen)[:, :, None] + k  # [b, t, WINDOW]
        valid = k < seen[:, :, None]
        main_indices.append(
            physical(main_table, pos % ring, MAIN_PAGE, valid))
        main_lengths.append(seen.to(torch.int32))
        q_step, extra_step = [], []
        for _ in range(layers):
            q_step.append(_randn(gen, b, t, h, D_QK).clamp(-1, 1).to(torch.bfloat16))
            # The indexer's pick: extra_topk distinct compressed tokens per query token.
            score = torch.rand(b, t, args.extra_context, generator=gen).masked_fill(
                torch.arange(args.extra_context)[None, None, :] >= compressed[:, None, None], -1)
            picked = score.topk(args.extra_topk, dim=-1)
            ok = picked.values >= 0
            extra_step.append(physical(extra_table, picked.indices, EXTRA_PAGE, ok))
        decode_q.append(q_step)
        extra_indices.append(extra_step)

    to = lambda x: x.to(device)  # noqa: E731
    return Problem(
        sinks=[to(s) for s in sinks], kv=to(kv), prefill_q=[to(q) for q in prefill_q],
        prefill_indices=[to(i) for i in prefill_indices], prefill_lengths=to(prefill_lengths),
        main_cache=main_cache, main_flat=main_flat, extra_cache=extra_cache,
        extra_flat=extra_flat, main_table=to(main_table), extra_table=to(extra_table),
        decode_q=[[to(q) for q in qs] for qs in decode_q],
        main_indices=[to(i) for i in main_indices], main_lengths=[to(n) for n in main_lengths],
        extra_indices=[[to(i) for i in es] for es in extra_indices],
        extra_lengths=to(extra_lengths))


# ---- one shard of heads ------------------------------------------------------------------------


def timer(device: torch.device) -> Callable[[Callable[[], None]], float]:
    """fn -> milliseconds fn took (CUDA events on the current stream, or the host clock)."""
    if device.type == "cuda":
        def cuda_time(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return cuda_time

    def host_time(fn):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return host_time


@dataclasses.dataclass
class ShardRun:
    heads: Tuple[int, int]
    prefill: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # [layers] (out, max, lse)
    decode: List[List[Tuple[torch.Tensor, torch.Tensor]]]  # [steps][layers] (out, lse)
    prefill_ms: List[float]  # per run, all layers
    decode_ms: List[float]  # per step run, all layers
    decode_kernel: str
    decode_reason: str
    num_sm_parts: int


def run_shard(p: Problem, args: argparse.Namespace, device: torch.device, heads: Tuple[int, int],
              sink_heads: Tuple[int, int]) -> ShardRun:
    """Prefill and decode of heads [heads[0], heads[1]) of every layer, timed."""
    h = slice(*heads)
    hs = heads[1] - heads[0]
    layers = args.layers
    time_ms = timer(device)
    sinks = [s[slice(*sink_heads)].contiguous() for s in p.sinks]

    # Prefill: this rank's query heads (made contiguous before timing, as a rank holds them).
    qs = [q[:, h].contiguous() for q in p.prefill_q]
    s_q = qs[0].shape[0]
    prefill = [(torch.empty(s_q, hs, D_V, dtype=torch.bfloat16, device=device),
                torch.empty(s_q, hs, device=device), torch.empty(s_q, hs, device=device))
               for _ in range(layers)]

    def prefill_layers():
        for layer in range(layers):
            out, max_logits, lse = prefill[layer]
            sparse_mla.sparse_prefill(qs[layer], p.kv, p.prefill_indices[layer], SCALE,
                                      attn_sink=sinks[layer], topk_length=p.prefill_lengths,
                                      out=out, max_logits=max_logits, lse=lse)

    prefill_layers()  # warm-up
    prefill_ms = [time_ms(prefill_layers) for _ in range(args.repeats)]

    # Decode: static buffers that a step's inputs are copied into (what a CUDA graph reads).
    b, t = p.decode_q[0][0].shape[:2]
    q_buf = [torch.empty(b, t, hs, D_QK, dtype=torch.bfloat16, device=device)
             for _ in range(layers)]
    main_idx = torch.empty_like(p.main_indices[0])
    main_len = torch.empty_like(p.main_lengths[0])
    extra_idx = [torch.empty_like(p.extra_indices[0][0]) for _ in range(layers)]
    out_buf = [torch.empty(b, t, hs, D_V, dtype=torch.bfloat16, device=device)
               for _ in range(layers)]
    lse_buf = [torch.empty(b, t, hs, device=device) for _ in range(layers)]
    common = dict(extra_kv_cache=p.extra_cache, extra_topk_length=p.extra_lengths)

    def load(step: int) -> None:
        for layer in range(layers):
            q_buf[layer].copy_(p.decode_q[step][layer][:, :, h])
            extra_idx[layer].copy_(p.extra_indices[step][layer])
        main_idx.copy_(p.main_indices[step])
        main_len.copy_(p.main_lengths[step])

    def plan() -> sparse_mla.DecodePlan:
        return sparse_mla.plan_decode(q_buf[0], p.main_cache, main_idx, topk_length=main_len,
                                      attn_sink=sinks[0], extra_indices=extra_idx[0], **common)

    def decode_layers(the_plan: sparse_mla.DecodePlan) -> None:
        for layer in range(layers):
            sparse_mla.sparse_decode(q_buf[layer], p.main_cache, main_idx, topk_length=main_len,
                                     attn_sink=sinks[layer], extra_indices=extra_idx[layer],
                                     plan=the_plan, reuse_schedule=layer > 0,
                                     out=out_buf[layer], lse=lse_buf[layer], **common)

    load(0)
    step_plan = plan()
    if device.type == "cuda" and not args.no_graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            decode_layers(step_plan)  # warm-up outside the graph
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            decode_layers(step_plan)
        run_step = graph.replay
    else:
        decode_layers(step_plan)  # warm-up

        def run_step():
            decode_layers(plan())  # plan once per step, every layer reuses its schedule

    decode, decode_ms = [], []
    for step in range(args.steps):
        load(step)
        decode_ms += [time_ms(run_step) for _ in range(args.repeats)]
        decode.append([(out_buf[layer].clone(), lse_buf[layer].clone())
                       for layer in range(layers)])
    return ShardRun(heads, prefill, decode, prefill_ms, decode_ms, step_plan.kernel,
                    step_plan.reason, step_plan.num_sm_parts)


def run_shards(p: Problem, args: argparse.Namespace, d: Dist, shards: int,
               mine: Sequence[int]) -> List[ShardRun]:
    per = args.heads // shards
    runs = []
    for s in mine:
        sink_shard = (s + 1) % shards if args.fault == "sink-slice" else s
        runs.append(run_shard(p, args, d.device, (s * per, (s + 1) * per),
                              (sink_shard * per, (sink_shard + 1) * per)))
    return runs


def local_heads(runs: List[ShardRun], pick: Callable[[ShardRun], torch.Tensor],
                dim: int) -> torch.Tensor:
    return torch.cat([pick(r) for r in runs], dim=dim) if len(runs) > 1 else pick(runs[0])


# ---- the check ---------------------------------------------------------------------------------


def compare(name: str, actual: torch.Tensor, expected: torch.Tensor, tol) -> Optional[str]:
    """SPEC §5: ±inf / NaN positions equal; each element within abs_tol or rel_tol; cosine
    difference of the finite elements within cos_tol. None when it passes, else why not."""
    abs_tol, rel_tol, cos_tol = tol
    if actual.shape != expected.shape:
        return f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    e = expected.to(torch.float64)
    a = actual.to(device=e.device, dtype=torch.float64)
    for what, test in (("+inf", torch.isposinf), ("-inf", torch.isneginf), ("NaN", torch.isnan)):
        diff = test(a) != test(e)
        if diff.any():
            i = tuple(diff.nonzero()[0].tolist())
            return (f"{name}: {what} positions differ, first at {list(i)}: got {a[i].item()}, "
                    f"expected {e[i].item()} ({int(diff.sum())} elements)")
    finite = torch.isfinite(e)
    err = (a - e).abs()
    bad = finite & ~((err <= abs_tol) | (err <= rel_tol * e.abs()))
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        return (f"{name}: {int(bad.sum())} of {a.numel()} elements off, first at {list(i)}: got "
                f"{a[i].item()}, expected {e[i].item()} (max abs err "
                f"{err[finite].max().item():.3g})")
    if cos_tol > 0:
        af, ef = a[finite], e[finite]
        denominator = (af * af + ef * ef).sum().item()
        cos_diff = 0.0 if denominator == 0 else 1 - 2 * (af * ef).sum().item() / denominator
        if cos_diff > cos_tol:
            return f"{name}: cosine difference {cos_diff:.3g} > {cos_tol}"
    return None


def sub_cache(cache: torch.Tensor, flat: torch.Tensor, blocks: torch.Tensor,
              slots: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The cache of only ``blocks`` (in that order) and ``slots`` renumbered into it."""
    page, stride = cache.shape[1], flat.shape[1]
    small = sparse_mla.empty_kv_cache(len(blocks), page, FORMAT, block_stride=stride,
                                      device=flat.device)
    small.as_strided((len(blocks), stride), (stride, 1)).copy_(flat[blocks])
    new_block = torch.full((cache.shape[0],), -1, dtype=torch.int64, device=flat.device)
    new_block[blocks] = torch.arange(len(blocks), device=flat.device)
    s = slots.to(torch.int64)
    renumbered = new_block[s.clamp(min=0) // page] * page + s.clamp(min=0) % page
    return small, torch.where(s >= 0, renumbered, -1).to(torch.int32)


def check(p: Problem, args: argparse.Namespace, prefill, decode, all_heads: ShardRun) -> List[str]:
    """Every gathered output against the all-heads run (SPEC §5 tolerances), and a sample
    against the float64 reference. Returns the failures (empty: passed)."""
    failures = []
    # Every query sees at least one key (its own token), so no lse may be +inf: outputs that
    # attended to nothing would match each other and the check would say nothing.
    for what, lse in ([(f"prefill layer {i} lse", prefill[i][2]) for i in range(args.layers)] +
                      [(f"decode step {s} layer {i} lse", decode[s][i][1])
                       for s in range(args.steps) for i in range(args.layers)]):
        if not torch.isfinite(lse).all():
            failures.append(f"{what}: {int((~torch.isfinite(lse)).sum())} queries saw no key")
    for layer in range(args.layers):
        for name, got, want, tol in zip(("out", "max_logits", "lse"), prefill[layer],
                                        all_heads.prefill[layer],
                                        (PREFILL_OUT, PREFILL_STATS, PREFILL_STATS)):
            failures.append(compare(f"prefill layer {layer} {name}", got, want, tol))
    for step in range(args.steps):
        for layer in range(args.layers):
            for name, got, want, tol in zip(("out", "lse"), decode[step][layer],
                                            all_heads.decode[step][layer],
                                            (DECODE_OUT, DECODE_LSE)):
                failures.append(compare(f"decode step {step} layer {layer} {name}", got, want,
                                        tol))

    # float64 reference: three prefill queries of layer 0, two requests of the last decode step
    # (a short and a long one) of the last layer.
    s_q = args.prefill_tokens
    rows = torch.tensor(sorted({0, s_q // 2, s_q - 1}), device=p.kv.device)
    ref = sparse_prefill_reference(
        p.prefill_q[0][rows], p.kv, p.prefill_indices[0][rows], SCALE,
        attn_sink=p.sinks[0], topk_length=p.prefill_lengths[rows])
    for name, got, want, tol in zip(("out", "max_logits", "lse"), prefill[0], ref,
                                    (PREFILL_OUT, PREFILL_STATS, PREFILL_STATS)):
        failures.append(compare(f"prefill layer 0 {name} (reference)", got[rows], want, tol))
    step, layer = args.steps - 1, args.layers - 1
    requests = sorted({0, args.batch - 1})
    r = torch.tensor(requests, device=p.kv.device)
    main, main_idx = sub_cache(p.main_cache, p.main_flat, p.main_table[r].flatten(),
                               p.main_indices[step][r])
    extra, extra_idx = sub_cache(p.extra_cache, p.extra_flat, p.extra_table[r].flatten(),
                                 p.extra_indices[step][layer][r])
    ref = sparse_decode_reference(
        p.decode_q[step][layer][r], main, main_idx, topk_length=p.main_lengths[step][r],
        attn_sink=p.sinks[layer], extra_kv_cache=extra, extra_indices=extra_idx,
        extra_topk_length=p.extra_lengths[r])
    for name, got, want, tol in zip(("out", "lse"), decode[step][layer], ref,
                                    (DECODE_OUT, DECODE_LSE)):
        failures.append(compare(f"decode step {step} layer {layer} {name} (reference, "
                                f"requests {requests})", got[r], want, tol))
    return [f for f in failures if f is not None]


# ---- report ------------------------------------------------------------------------------------


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _commit() -> Dict:
    if os.environ.get("SMLA_COMMIT"):
        return {"commit": os.environ["SMLA_COMMIT"], "commit_from": "SMLA_COMMIT"}
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain"], capture_output=True,
                               text=True, timeout=10, check=True).stdout.strip() != ""
        return {"commit": sha, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def _command(d: Dist) -> str:
    """The command line as it was launched (torchrun's form when there are several processes)."""
    if d.world == 1:
        return " ".join(["python"] + sys.argv)
    local = os.environ.get("LOCAL_WORLD_SIZE", str(d.world))
    return " ".join([f"torchrun --nproc_per_node={local}"] + sys.argv)


def shard_entry(rank: int, shard: int, run: ShardRun, gather_ms: List[float],
                device: str, layers: int) -> Dict:
    return dict(rank=rank, shard=shard, heads=list(run.heads), device=device,
                prefill_ms_per_layer=_median(run.prefill_ms) / layers,
                decode_step_ms=_median(run.decode_ms),
                gather_ms=_median(gather_ms) if gather_ms else None,
                prefill_runs_ms=run.prefill_ms, decode_runs_ms=run.decode_ms,
                gather_runs_ms=gather_ms, decode_kernel=run.decode_kernel,
                decode_num_sm_parts=run.num_sm_parts, decode_reason=run.decode_reason)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    d = init_dist(args)
    shards = args.shards or d.world
    if shards < 1 or shards % d.world or args.heads % shards:
        message = (f"tensor_parallel: --shards = {shards} must be a positive multiple of the "
                   f"process count {d.world} and divide --heads = {args.heads}")
        if d.world > 1:
            dist.destroy_process_group()
        raise SystemExit(message)
    per_process = shards // d.world
    mine = list(range(d.rank * per_process, (d.rank + 1) * per_process))

    setup_start = time.perf_counter()
    p = make_problem(args, d.device)
    setup_s = time.perf_counter() - setup_start

    barrier(d)
    runs = run_shards(p, args, d, shards, mine)

    # Gather every output along the head dim; time one decode step's gather (all layers).
    prefill = [tuple(gather_heads(local_heads(runs, lambda r: r.prefill[layer][i], 1), 1, d)
                     for i in range(3)) for layer in range(args.layers)]
    decode = [[tuple(gather_heads(local_heads(runs, lambda r: r.decode[step][layer][i], 2), 2, d)
                     for i in range(2)) for layer in range(args.layers)]
              for step in range(args.steps)]
    gather_ms: List[float] = []
    if d.world > 1:
        time_ms = timer(d.device)
        step_outputs = [local_heads(runs, lambda r: r.decode[0][layer][i], 2)
                        for layer in range(args.layers) for i in range(2)]
        for _ in range(1 + args.repeats):
            barrier(d)
            gather_ms.append(time_ms(lambda: [gather_heads(t, 2, d) for t in step_outputs]))
        gather_ms = gather_ms[1:]  # the first gather warms the communicator up
    entries = [shard_entry(d.rank, s, run, gather_ms, str(d.device), args.layers)
               for s, run in zip(mine, runs)]
    if d.world > 1:
        every: List[Optional[List[Dict]]] = [None] * d.world
        dist.all_gather_object(every, entries)
        entries = [e for rank_entries in every for e in rank_entries]

    # Rank 0: all heads in one process on its device, then the check.
    status = [1]
    if d.rank == 0:
        all_heads = run_shard(p, args, d.device, (0, args.heads), (0, args.heads))
        failures = check(p, args, prefill, decode, all_heads)
        report = make_report(args, d, shards, entries, all_heads, failures, setup_s)
        print_report(report)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
                f.write("\n")
            print(f"tensor_parallel: wrote {args.json}")
        status = [0 if not failures else 1]
    if d.world > 1:
        dist.broadcast_object_list(status, src=0)
        dist.destroy_process_group()
    return status[0]


def make_report(args, d: Dist, shards: int, entries: List[Dict], all_heads: ShardRun,
                failures: List[str], setup_s: float) -> Dict:
    one = shard_entry(0, -1, all_heads, [], str(d.device), args.layers)
    slowest_prefill = max(e["prefill_ms_per_layer"] for e in entries)
    slowest_decode = max(e["decode_step_ms"] for e in entries)
    slowest_decode_gather = max(e["decode_step_ms"] + (e["gather_ms"] or 0) for e in entries)
    return dict(
        example="examples/tensor_parallel.py", command=_command(d),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **_commit(), host=socket.gethostname(), torch=torch.__version__,
        sparse_mla=sparse_mla.__version__, device=device_name(d.device), backend=args.device,
        processes=d.world, dist_backend=d.backend, shards=shards,
        nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
        cuda_graph=args.device == "cuda" and not args.no_graph, fault=args.fault,
        config=dict(model=args.model, heads=args.heads, heads_per_shard=args.heads // shards,
                    layers=args.layers, steps=args.steps, repeats=args.repeats,
                    d_qk=D_QK, d_v=D_V, prefill_tokens=args.prefill_tokens,
                    prefill_context=args.prefill_context, prefill_topk=args.prefill_topk,
                    batch=args.batch, decode_tokens=args.decode_tokens, format=FORMAT,
                    main_page=MAIN_PAGE, main_topk=WINDOW, extra_page=EXTRA_PAGE,
                    extra_topk=args.extra_topk, extra_context=args.extra_context,
                    seed=args.seed),
        setup_s=setup_s,
        per_rank=entries, all_heads=one,
        speedup=dict(prefill=one["prefill_ms_per_layer"] / slowest_prefill,
                     decode=one["decode_step_ms"] / slowest_decode,
                     decode_with_gather=one["decode_step_ms"] / slowest_decode_gather),
        check=dict(passed=not failures, failures=failures,
                   tolerances=dict(prefill_out=PREFILL_OUT, prefill_stats=PREFILL_STATS,
                                   decode_out=DECODE_OUT, decode_lse=DECODE_LSE)))


def print_report(r: Dict) -> None:
    c = r["config"]
    how = f"{r['processes']} process(es)" + (f", {r['dist_backend']}" if r["dist_backend"] else "")
    print(f"tensor_parallel: {c['model']}, {c['heads']} heads in {r['shards']} shards of "
          f"{c['heads_per_shard']} ({how}) on {r['backend']}: {r['device']}")
    print(f"  prefill {c['prefill_tokens']} tokens of {c['prefill_context']}, topk "
          f"{c['prefill_topk']}; decode {c['batch']} requests x {c['decode_tokens']} token(s), "
          f"{FORMAT} window {WINDOW} (page {MAIN_PAGE}) + compressed {c['extra_topk']} of "
          f"{c['extra_context']} (page {EXTRA_PAGE}); {c['layers']} layers, {c['steps']} steps"
          f"{', CUDA graph' if r['cuda_graph'] else ''}, median of {c['repeats']} run(s)")
    print(f"  {'rank':>4} {'shard':>5} {'heads':>8} {'prefill ms/layer':>17} "
          f"{'decode ms/step':>15} {'gather ms':>10}  decode kernel")
    for e in r["per_rank"] + [r["all_heads"]]:
        shard = "all" if e["shard"] < 0 else str(e["shard"])
        gather = "-" if e["gather_ms"] is None else f"{e['gather_ms']:.3f}"
        print(f"  {e['rank']:>4} {shard:>5} {e['heads'][0]:>3}-{e['heads'][1] - 1:<4} "
              f"{e['prefill_ms_per_layer']:>17.3f} {e['decode_step_ms']:>15.3f} {gather:>10}  "
              f"{e['decode_kernel']} ({e['decode_num_sm_parts']} parts)")
    s = r["speedup"]
    print(f"  speed-up over one device (all heads / slowest shard): prefill {s['prefill']:.2f}x, "
          f"decode {s['decode']:.2f}x ({s['decode_with_gather']:.2f}x with the gather)")
    if r["check"]["passed"]:
        print("tensor_parallel: check passed (gathered heads = all-heads run and float64 "
              "reference sample, SPEC §5 tolerances)")
    else:
        print(f"tensor_parallel: check FAILED ({len(r['check']['failures'])} comparisons):")
        for f in r["check"]["failures"][:20]:
            print(f"  {f}")


if __name__ == "__main__":
    sys.exit(main())
