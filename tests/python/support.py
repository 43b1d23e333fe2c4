"""Test data and comparison of SPEC §5 for the Python tests, and the golden-case loader.

Data recipe: q, kv ~ randn/10 + a per-tensor offset (decode q clamped to ±1); rows that no valid
slot references poisoned with NaN before quantization; invalid indices drawn from INT_MIN,
-123456, -1, s_kv (or the slot count), 114514, INT_MAX; some queries with no valid slot;
topk_length values 0, 1, topk and in between; sinks finite, -inf and +inf; padded strides.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Dict, Optional

import torch

import sparse_mla

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden"

INT_MIN, INT_MAX = -(2**31), 2**31 - 1

# SPEC §5 tolerances: (abs_tol, rel_tol, cos_tol); cos_tol 0 = not checked.
PREFILL_OUT = (8e-4, 3 / 128, 7e-6)
PREFILL_STATS = (1e-6, 2 / 65536, 0.0)
DECODE_OUT = (1e-3, 2 / 128, 5e-6)
DECODE_LSE = (1e-6, 8 / 65536, 0.0)


def assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, tol) -> None:
    """SPEC §5 comparison: ±inf / NaN positions equal; each element within abs_tol or rel_tol;
    cosine difference ``1 - 2*sum(a*b)/sum(a*a + b*b)`` of the finite elements within cos_tol."""
    abs_tol, rel_tol, cos_tol = tol
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    for what, test in (("+inf", torch.isposinf), ("-inf", torch.isneginf), ("NaN", torch.isnan)):
        diff = test(a) != test(e)
        if diff.any():
            i = diff.nonzero()[0].tolist()
            raise AssertionError(
                f"{name}: {what} positions differ, first at {i}: got {a[tuple(i)].item()}, "
                f"expected {e[tuple(i)].item()} ({int(diff.sum())} elements)"
            )
    finite = torch.isfinite(e)
    err = (a - e).abs()
    rel = err / e.abs()
    bad = finite & ~((err <= abs_tol) | (rel <= rel_tol))
    if bad.any():
        i = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {a.numel()} elements off, first at {i}: got "
            f"{a[tuple(i)].item()}, expected {e[tuple(i)].item()} (max abs err "
            f"{err[finite].max().item():.3g})"
        )
    if cos_tol > 0:
        af, ef = a[finite], e[finite]
        denominator = (af * af + ef * ef).sum().item()
        cos_diff = 0.0 if denominator == 0 else 1 - 2 * (af * ef).sum().item() / denominator
        assert cos_diff <= cos_tol, f"{name}: cosine difference {cos_diff:.3g} > {cos_tol}"


def padded(t: torch.Tensor, pad_last: int = 16, pad_other: int = 1) -> torch.Tensor:
    """A copy of ``t`` in a larger buffer: every dim padded (last by ``pad_last`` elements,
    others by ``pad_other``), so strides are non-contiguous but rows stay 16-byte aligned."""
    if t.dim() == 0:
        return t.clone()
    big_shape = [s + pad_other for s in t.shape[:-1]] + [t.shape[-1] + pad_last]
    big = torch.full(big_shape, float("nan") if t.is_floating_point() else -7,
                     dtype=t.dtype, device=t.device)
    view = big[tuple(slice(0, s) for s in t.shape)]
    view.copy_(t)
    return view


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    offset = torch.randn((), generator=gen) / 10
    return torch.randn(*shape, generator=gen) / 10 + offset


def _index_lists(gen, rows: int, topk: int, num_slots: int, invalid: bool, empty: bool,
                 lengths: Optional[torch.Tensor]) -> torch.Tensor:
    """[rows, topk] int32 lists of valid slots mixed with every kind of invalid value."""
    lists = torch.randint(0, max(num_slots, 1), (rows, topk), generator=gen, dtype=torch.int64)
    if num_slots == 0:
        lists.fill_(-1)
    if invalid:
        kinds = torch.tensor([INT_MIN, -123456, -1, num_slots, 114514 + num_slots, INT_MAX])
        mask = torch.rand((rows, topk), generator=gen) < 0.2
        picks = kinds[torch.randint(0, len(kinds), (rows, topk), generator=gen)]
        lists = torch.where(mask, picks, lists)
    if empty and rows > 1:
        lists[1] = -1
    return lists.to(torch.int32)


def _lengths(gen, n: int, topk: int) -> torch.Tensor:
    """[n] int32 cycling through 0, 1, topk and random values in between."""
    choices = [0, 1, topk] + torch.randint(0, topk + 1, (max(n, 1),), generator=gen).tolist()
    return torch.tensor([choices[i % len(choices)] for i in range(n)], dtype=torch.int32)


def _sinks(gen, h_q: int) -> torch.Tensor:
    sink = torch.randn(h_q, generator=gen)
    if h_q > 2:
        sink[0], sink[1] = -math.inf, math.inf
    return sink


def _poison_unreferenced(rows: torch.Tensor, lists: torch.Tensor, valid: torch.Tensor) -> None:
    """Sets to NaN every row of ``rows`` [num_slots, d] that no valid slot references."""
    used = torch.zeros(rows.shape[0], dtype=torch.bool)
    used[lists.to(torch.int64)[valid]] = True
    rows[~used] = math.nan


def _valid_mask(lists: torch.Tensor, num_slots: int, lengths: Optional[torch.Tensor]):
    """lists [n, topk], lengths [n] or None -> [n, topk] bool."""
    lists = lists.to(torch.int64)
    valid = (lists >= 0) & (lists < num_slots)
    if lengths is not None:
        valid &= torch.arange(lists.shape[1])[None, :] < lengths.to(torch.int64)[:, None]
    return valid


def prefill_case(s_q=6, s_kv=200, h_q=16, d_qk=576, topk=64, *, attn_sink=True,
                 topk_length=True, pad=True, invalid=True, empty=True, poison=True,
                 sm_scale=None, seed=0) -> Dict:
    """Arguments of sparse_prefill (keys as its parameter names) per the recipe."""
    gen = torch.Generator().manual_seed(seed)
    q = _randn(gen, s_q, h_q, d_qk).to(torch.bfloat16)
    kv = _randn(gen, s_kv, 1, d_qk)
    lengths = _lengths(gen, s_q, topk) if topk_length else None
    lists = _index_lists(gen, s_q, topk, s_kv, invalid, empty, lengths)
    if poison:
        _poison_unreferenced(kv[:, 0, :], lists, _valid_mask(lists, s_kv, lengths))
    kv = kv.to(torch.bfloat16)
    indices = lists[:, None, :]
    if pad:
        q, kv, indices = padded(q), padded(kv), padded(indices)
    return dict(q=q, kv=kv, indices=indices, sm_scale=sm_scale or d_qk ** -0.5,
                attn_sink=_sinks(gen, h_q) if attn_sink else None, topk_length=lengths)


def _cache(gen, fmt: str, d_qk: int, num_blocks: int, pbs: int, lists, valid, poison: bool,
           pad: bool, layout: Optional[str] = None, quantizer: str = "library"):
    """A quantized cache of random rows (unreferenced ones NaN), block stride padded if `pad`
    (page_split blocks have a fixed stride; token_interleaved V4.1 ones pad by a record).
    quantizer: "library" (sparse_mla.quantize_kv_cache) or "reference" (the torch one)."""
    rows = _randn(gen, num_blocks * pbs, d_qk)
    if poison:
        _poison_unreferenced(rows, lists, valid)
    rows = rows.to(torch.bfloat16).view(num_blocks, pbs, 1, d_qk)
    info = sparse_mla.kv_cache_format(fmt)
    layout = info.layout(layout)
    stride = sparse_mla.kv_cache_block_stride(fmt, pbs, d_qk, kv_layout=layout)
    if pad and layout != "page_split":
        stride += info.alignment(layout) if info.alignment(layout) > 1 else 16
    if quantizer == "reference":
        from sparse_mla.reference import quantize_kv_cache_reference
        return quantize_kv_cache_reference(rows, fmt, block_stride=stride, kv_layout=layout)
    cache = sparse_mla.empty_kv_cache(num_blocks, pbs, fmt, d_qk=d_qk, block_stride=stride,
                                      kv_layout=layout)
    return sparse_mla.quantize_kv_cache(rows, fmt, kv_layout=layout, out=cache)


def decode_case(b=3, s_q=2, h_q=16, topk=64, fmt="v32_fp8", *, d_qk=None, page_block_size=61,
                num_blocks=None, topk_length="request", attn_sink=True, extra=False,
                extra_topk=40, extra_page_block_size=2, extra_num_blocks=None,
                extra_topk_length="token", pad=True, invalid=True, empty=True, poison=True,
                softmax_scale=None, kv_layout=None, extra_fmt=None, extra_kv_layout=None,
                quantizer="library", seed=0) -> Dict:
    """Arguments of sparse_decode (keys as its keyword names) per the recipe.

    topk_length / extra_topk_length: "request" ([b]), "token" ([b, s_q]) or None.
    kv_layout / extra_kv_layout: the caches' page layouts (None: the format's own); extra_fmt:
    the extra cache's format (None: fmt). They are passed as arguments when given.
    quantizer: how the caches are made, "library" or "reference" (see _cache).
    """
    gen = torch.Generator().manual_seed(seed)
    info = sparse_mla.kv_cache_format(fmt)
    d_qk = d_qk or info.d_qk or 576
    q = _randn(gen, b, s_q, h_q, d_qk).clamp(-1, 1).to(torch.bfloat16)

    def one_list(kind, count, pbs, blocks, cache_fmt, layout):
        blocks = blocks or max(1, -(-2 * count // pbs))
        lengths = None
        if kind == "request":
            lengths = _lengths(gen, b, count)
        elif kind == "token":
            lengths = _lengths(gen, b * s_q, count).view(b, s_q)
        per_query = None if lengths is None else (
            lengths[:, None].expand(b, s_q) if lengths.dim() == 1 else lengths).reshape(-1)
        lists = _index_lists(gen, b * s_q, count, blocks * pbs, invalid, empty, per_query)
        cache = _cache(gen, cache_fmt, d_qk, blocks, pbs, lists,
                       _valid_mask(lists, blocks * pbs, per_query), poison, pad, layout, quantizer)
        indices = lists.view(b, s_q, count)
        return (padded(indices) if pad else indices), lengths, cache

    indices, lengths, cache = one_list(topk_length, topk, page_block_size, num_blocks, fmt,
                                       kv_layout)
    args = dict(q=padded(q) if pad else q, kv_cache=cache, indices=indices, topk_length=lengths,
                attn_sink=_sinks(gen, h_q) if attn_sink else None, softmax_scale=softmax_scale)
    if extra:
        e_indices, e_lengths, e_cache = one_list(extra_topk_length, extra_topk,
                                                 extra_page_block_size, extra_num_blocks,
                                                 extra_fmt or fmt, extra_kv_layout or kv_layout)
        args.update(extra_kv_cache=e_cache, extra_indices=e_indices, extra_topk_length=e_lengths)
        if extra_fmt is not None:
            args["extra_kv_format"] = extra_fmt
        if extra_kv_layout is not None:
            args["extra_kv_layout"] = extra_kv_layout
    if kv_layout is not None:
        args["kv_layout"] = kv_layout
    return args


def token_records(cache: torch.Tensor, fmt: str, layout: Optional[str] = None) -> torch.Tensor:
    """[num_slots, bytes_per_token] uint8: each token's record (data, scales, tail) gathered by
    the SPEC §4 offsets of its layout, whatever the block stride (a view, a padded or a packed
    cache)."""
    info = sparse_mla.kv_cache_format(fmt)
    layout = info.layout(layout)
    raw = cache.view(torch.uint8)[:, :, 0, :]  # [num_blocks, pbs, bytes_per_token] token rows
    num_blocks, pbs, record = raw.shape
    if layout == "token_interleaved":
        return raw.reshape(num_blocks * pbs, record)
    # page_split: the block's first pbs * record bytes, data rows then scale rows.
    data = {"v4_fp8": 576, "v41_fp8": 512, "v41_fp4": 256}[info.name]
    block = raw.reshape(num_blocks, pbs * record)
    rows = block[:, : pbs * data].reshape(num_blocks, pbs, data)
    scales = block[:, pbs * data:].reshape(num_blocks, pbs, record - data)
    return torch.cat([rows, scales], dim=-1).reshape(num_blocks * pbs, record)


# ---- golden cases (tests/data/golden, from FlashMLA) -------------------------------------------

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "int32": torch.int32,
           "uint8": torch.uint8}


def golden_manifest() -> Dict:
    return json.loads((GOLDEN / "manifest.json").read_text())


def golden_tensor(case: str, name: str) -> torch.Tensor:
    """One tensor of a golden case; caches as [num_blocks, pbs, 1, bytes_per_token] views with
    the manifest's block stride."""
    entry = golden_manifest()["cases"][case][name]
    data = bytearray((GOLDEN / entry["file"]).read_bytes())
    flat = torch.frombuffer(data, dtype=_DTYPES[entry["dtype"]])
    shape = entry["shape"]
    if "block_stride_bytes" in entry:
        stride = entry["block_stride_bytes"]
        return flat.as_strided(shape, (stride, shape[3], shape[3], 1))
    return flat.view(shape)


def golden_scalar(case: str, name: str):
    return golden_manifest()["cases"][case][name]
