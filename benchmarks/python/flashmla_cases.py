"""Inputs shaped as FlashMLA's own benchmarks make them, so that our times compare with its
figures (``docs/flashmla_baseline.md``: "timed with its own case generators"); the CLI's bench
draws its lists the same way (``verify::PrefillRecipe::distinct_indices``,
``verify::DecodeRecipe::request_tokens``).

Prefill: each token's list is ``topk`` distinct slots of the ``s_kv`` rows.

Decode, per cache (main, and extra where the row has one), as FlashMLA's test library does:

- each request's cache length is ``max(round(N(s_k, s_k / 2)), s_q)`` tokens;
- every request owns ``max_len / page`` pages (``max_len``: the longest length rounded up to
  4 pages), a random share of one pool: the cache holds ``b * max_len`` tokens;
- each query token's list is ``topk`` distinct positions below its request's length, in random
  order, -1 where the request is shorter than ``topk``, as slots of the request's pages;
- no ``topk_length`` (the lists are full), the cache's rows random (N(0, 0.1) bf16, quantised).

``host_time.decode_inputs`` draws every list over one small shared cache instead (2 x topk
slots for all requests), which is enough for host time but lets L2 serve a large batch's repeats.

    inputs = decode_inputs(dict(fmt="v4_fp8", b=64, s_q=2, h_q=64, topk=128, page=256,
                                extra=(512, 64), s_k=16384), "cuda")
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch

import sparse_mla

# Requests' blocks generated and quantised at once while the cache is filled.
_FILL_BLOCKS_PER_STEP = 4096


def request_pages(b: int, s_q: int, s_k: int, page: int,
                  gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Each request's length and pages: (lengths [b] int64, page table [b, max_len / page] int64,
    max_len)."""
    lengths = torch.normal(float(s_k), s_k / 2, (b,), generator=gen).round().to(torch.int64)
    lengths.clamp_(min=s_q)
    align = 4 * page
    max_len = max(1, -(-int(lengths.max()) // align)) * align
    pages = max_len // page
    table = torch.randperm(b * pages, generator=gen).view(b, pages)
    return lengths, table, max_len


def token_lists(lengths: torch.Tensor, table: torch.Tensor, max_len: int, s_q: int, topk: int,
                page: int, gen: torch.Generator) -> torch.Tensor:
    """[b, s_q, topk] int32 slots: per token, topk distinct positions below its request's length
    in random order (-1 past a shorter request's positions), through the request's pages."""
    b = lengths.numel()
    width = max(max_len, topk)
    keys = torch.rand(b, s_q, width, generator=gen)
    position = torch.arange(width)
    beyond = position.view(1, 1, width) >= lengths.view(b, 1, 1)
    keys.masked_fill_(beyond, -1.0)  # chosen only where a request has fewer than topk positions
    picked_keys, positions = keys.topk(topk, dim=-1)
    valid = picked_keys >= 0
    positions = positions.clamp(max=max_len - 1)
    request_pages_of = table.gather(1, (positions // page).view(b, -1)).view(b, s_q, topk)
    slots = request_pages_of * page + positions % page
    return torch.where(valid, slots, torch.full_like(slots, -1)).to(torch.int32)


def fill_cache(fmt: str, num_blocks: int, page: int, device: str, seed: int) -> torch.Tensor:
    """A cache of num_blocks pages of random rows, generated and quantised on `device` a few
    thousand blocks at a time."""
    d_qk = sparse_mla.kv_cache_format(fmt).d_qk
    cache = sparse_mla.empty_kv_cache(num_blocks, page, fmt, device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    step = max(1, _FILL_BLOCKS_PER_STEP * 64 // page)
    for first in range(0, num_blocks, step):
        n = min(step, num_blocks - first)
        rows = (torch.randn(n, page, 1, d_qk, generator=gen, device=device) / 10).to(torch.bfloat16)
        sparse_mla.quantize_kv_cache(rows, fmt, out=cache[first:first + n])
    return cache


def decode_inputs(case: Dict, device: str, seed: int = 0, lengths_seed: int = 0) -> Dict:
    """q, the caches and the lists of one decode row (keys: fmt, b, s_q, h_q, topk, page, s_k,
    extra (topk, page) or None). The lengths and pages come from ``lengths_seed``, everything
    else from ``seed``: two calls with the same ``lengths_seed`` give inputs of the same shapes
    with other values."""
    fmt, b, s_q, h_q, topk, page, s_k = (case[k] for k in
                                          ("fmt", "b", "s_q", "h_q", "topk", "page", "s_k"))
    d_qk = sparse_mla.kv_cache_format(fmt).d_qk
    layout_gen = torch.Generator().manual_seed(lengths_seed)
    gen = torch.Generator().manual_seed(seed)

    def one(count: int, pbs: int, cache_fmt: str, cache_seed: int):
        lengths, table, max_len = request_pages(b, s_q, s_k, pbs, layout_gen)
        slots = token_lists(lengths, table, max_len, s_q, count, pbs, gen).to(device)
        return fill_cache(cache_fmt, table.numel(), pbs, device, cache_seed), slots

    q = (torch.randn(b, s_q, h_q, d_qk, generator=gen) / 10).to(torch.bfloat16).to(device)
    cache, slots = one(topk, page, fmt, 2 * seed + 1)
    args = dict(q=q, kv_cache=cache, indices=slots,
                attn_sink=torch.randn(h_q, generator=gen).to(device))
    if case["extra"] is not None:
        e_cache, e_slots = one(*case["extra"], case.get("extra_fmt", fmt), 2 * seed + 2)
        args.update(extra_kv_cache=e_cache, extra_indices=e_slots)
    return args


def prefill_inputs(case: Dict, device: str, seed: int = 1) -> Dict:
    """q, kv and lists of one prefill row (keys: s_q, s_kv, h_q, d_qk, topk): each token's list
    topk distinct slots in random order (-1 past s_kv where topk exceeds it), drawn on `device`
    a few hundred tokens at a time."""
    s_q, s_kv, h_q, d_qk, topk = (case[k] for k in ("s_q", "s_kv", "h_q", "d_qk", "topk"))
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(s_q, h_q, d_qk, generator=gen) / 10).to(torch.bfloat16).to(device)
    device_gen = torch.Generator(device=device).manual_seed(seed)
    kv = (torch.randn(s_kv, 1, d_qk, generator=device_gen, device=device) / 10).to(torch.bfloat16)
    indices = torch.empty(s_q, 1, topk, dtype=torch.int32, device=device)
    width = max(s_kv, topk)
    step = max(1, (1 << 24) // width)
    for first in range(0, s_q, step):
        n = min(step, s_q - first)
        keys = torch.rand(n, width, generator=device_gen, device=device)
        keys[:, s_kv:] = -1.0
        picked_keys, slots = keys.topk(topk, dim=-1)
        slots = torch.where(picked_keys >= 0, slots, torch.full_like(slots, -1))
        indices[first:first + n, 0] = slots.to(torch.int32)
    return dict(q=q, kv=kv, indices=indices, sm_scale=d_qk ** -0.5)
