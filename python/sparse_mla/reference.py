"""The definitions of SPEC §2–§4 in plain torch, for tests: slow, float64, independent of the
compiled library (it dequantizes caches and quantizes rows with its own torch code).

- :func:`sparse_prefill_reference`, :func:`sparse_decode_reference` — the two operations;
  outputs in float32 (out unrounded), accumulation in float64.
- :func:`dequantize_kv_cache_reference` — cache bytes → fp32 rows (``e4m3 * scale`` in fp32).
- :func:`quantize_kv_cache_reference` — FlashMLA's reference quantizer, byte for byte.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from sparse_mla.kv_cache import empty_kv_cache, infer_kv_cache_format, kv_cache_format

_E4M3_MAX = 448.0
_MIN_SCALE = 1e-4


def _attend(
    q: torch.Tensor,
    rows: torch.Tensor,
    valid: torch.Tensor,
    scale: float,
    d_v: int,
    attn_sink: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One softmax per query and head over gathered rows.

    Args:
        q: ``[n, h_q, d_qk]`` float64.
        rows: ``[n, k, d_qk]`` float64 (rows of invalid slots are ignored, NaN or not).
        valid: ``[n, k]`` bool, k >= 1.
        scale: softmax scale.
        d_v: value dims (first d_v of a row).
        attn_sink: ``[h_q]`` or None.

    Returns:
        out ``[n, h_q, d_v]``, max_logits ``[n, h_q]``, lse ``[n, h_q]``, all float64.
    """
    rows = torch.where(valid[:, :, None], rows, torch.zeros((), dtype=rows.dtype))
    scores = torch.einsum("nhd,nkd->nhk", q, rows) * scale
    scores = scores.masked_fill(~valid[:, None, :], -math.inf)
    max_logits = scores.amax(dim=-1)
    lse = torch.logsumexp(scores, dim=-1)
    empty = ~valid.any(dim=-1)  # [n]: no valid slot
    weights = torch.exp(scores - lse[..., None]).nan_to_num(nan=0.0)
    out = torch.einsum("nhk,nkd->nhd", weights, rows[:, :, :d_v])
    if attn_sink is not None:
        sink = attn_sink.to(torch.float64)
        out = out / (1.0 + torch.exp(sink[None, :] - lse))[..., None]
    out[empty] = 0.0
    lse[empty] = math.inf
    max_logits[empty] = -math.inf
    return out, max_logits, lse


def sparse_prefill_reference(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    d_v: int = 512,
    attn_sink: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    chunk: int = 64,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SPEC §2 in float64.

    Args:
        q: ``[s_q, h_q, d_qk]``; kv: ``[s_kv, 1, d_qk]``; indices: ``[s_q, 1, topk]`` int32;
        attn_sink: ``[h_q]``; topk_length: ``[s_q]`` — as :func:`sparse_mla.sparse_prefill`.
        chunk: query tokens per step (bounds memory).

    Returns:
        ``(out [s_q, h_q, d_v], max_logits [s_q, h_q], lse [s_q, h_q])`` float32 on q's device.
    """
    s_q, h_q, _ = q.shape
    s_kv = kv.shape[0]
    kv_rows = kv[:, 0, :].to(torch.float64)
    if s_kv == 0:  # every slot is invalid; one zero row keeps the gather below well-formed
        kv_rows = torch.zeros((1, kv.shape[2]), dtype=torch.float64, device=q.device)
    lists = indices[:, 0, :].to(torch.int64)
    topk = lists.shape[1]
    positions = torch.arange(topk, device=q.device)
    valid_all = (lists >= 0) & (lists < s_kv)
    if topk_length is not None:
        valid_all &= positions[None, :] < topk_length.to(torch.int64)[:, None]
    outs, maxes, lses = [], [], []
    for start in range(0, s_q, chunk):
        sl = slice(start, min(s_q, start + chunk))
        valid = valid_all[sl]
        rows = kv_rows[lists[sl].clamp(0, kv_rows.shape[0] - 1)]
        o, m, l = _attend(q[sl].to(torch.float64), rows, valid, sm_scale, d_v, attn_sink)
        outs.append(o)
        maxes.append(m)
        lses.append(l)
    if not outs:
        empty = torch.zeros((0, h_q), dtype=torch.float32, device=q.device)
        return torch.zeros((0, h_q, d_v), dtype=torch.float32, device=q.device), empty, empty
    return (torch.cat(outs).float(), torch.cat(maxes).float(), torch.cat(lses).float())


def _e4m3_to_float(byte_values: torch.Tensor) -> torch.Tensor:
    return byte_values.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


def _ue8m0_to_float(byte_values: torch.Tensor) -> torch.Tensor:
    values = torch.exp2(byte_values.to(torch.float32) - 127.0)
    return values.masked_fill(byte_values == 255, math.nan)


def dequantize_kv_cache_reference(
    cache: torch.Tensor, kv_format: Optional[str] = None
) -> torch.Tensor:
    """Decodes a paged cache with torch ops only (SPEC §4).

    Args:
        cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` bytes (any block stride),
            or bf16 rows for the bf16 format.
        kv_format: inferred when omitted.

    Returns:
        ``[num_blocks, page_block_size, 1, d_qk]`` float32 (``e4m3 * scale`` in fp32).
    """
    name = kv_format or infer_kv_cache_format(cache)
    num_blocks, pbs = cache.shape[0], cache.shape[1]
    if name == "bf16":
        if cache.dtype != torch.bfloat16:
            cache = cache.contiguous().view(torch.uint8).view(torch.bfloat16)
        return cache.to(torch.float32)
    raw = cache.view(torch.uint8)[:, :, 0, :]  # [num_blocks, pbs, bytes_per_token]
    if name == "v32_fp8":
        latent = _e4m3_to_float(raw[..., :512]).view(num_blocks, pbs, 4, 128)
        scales = raw[..., 512:528].contiguous().view(torch.float32)  # [nb, pbs, 4]
        rope = raw[..., 528:656].contiguous().view(torch.bfloat16).to(torch.float32)
        latent = (latent * scales[..., None]).view(num_blocks, pbs, 512)
        return torch.cat([latent, rope], dim=-1)[:, :, None, :]
    if name == "v4_fp8":
        # Per block: pbs rows of 576 bytes (448 e4m3 + 64 bf16), then pbs rows of 8 scale bytes.
        block = raw.contiguous().view(num_blocks, pbs * 584)
        data = block[:, : pbs * 576].view(num_blocks, pbs, 576)
        scale_bytes = block[:, pbs * 576:].view(num_blocks, pbs, 8)[..., :7]
        latent = _e4m3_to_float(data[..., :448]).view(num_blocks, pbs, 7, 64)
        latent = (latent * _ue8m0_to_float(scale_bytes)[..., None]).view(num_blocks, pbs, 448)
        rope = data[..., 448:576].contiguous().view(torch.bfloat16).to(torch.float32)
        return torch.cat([latent, rope], dim=-1)[:, :, None, :]
    raise ValueError(f"kv_format = {name!r} is not a KV-cache format")


def _tile_scales(amax: torch.Tensor) -> torch.Tensor:
    """Per-tile power-of-two scale: ``max(amax / 448, 1e-4)`` rounded up to a power of two."""
    raw = torch.clamp_min(amax / _E4M3_MAX, _MIN_SCALE)
    mantissa, exponent = torch.frexp(raw)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    return torch.ldexp(torch.ones_like(raw), exponent)


def quantize_kv_cache_reference(
    kv: torch.Tensor, kv_format: str, block_stride: Optional[int] = None
) -> torch.Tensor:
    """FlashMLA's reference quantizer in torch (finite input; padding bytes zero).

    Args:
        kv: ``[num_blocks, page_block_size, 1, d_qk]`` bf16.
        kv_format: ``"v32_fp8"``, ``"v4_fp8"`` or ``"bf16"``.
        block_stride: bytes between blocks (default: the smallest legal stride).

    Returns:
        ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8.
    """
    fmt = kv_cache_format(kv_format)
    num_blocks, pbs, _, d_qk = kv.shape
    cache = empty_kv_cache(num_blocks, pbs, fmt, d_qk=d_qk, block_stride=block_stride,
                           device=kv.device)
    x = kv[:, :, 0, :]
    if fmt.name == "bf16":
        cache[:, :, 0, :] = x.contiguous().view(torch.uint8)
        return cache
    quantized = 512 if fmt.name == "v32_fp8" else 448
    tile = 128 if fmt.name == "v32_fp8" else 64
    tiles = x[..., :quantized].to(torch.float32).reshape(num_blocks, pbs, -1, tile)
    scales = _tile_scales(tiles.abs().amax(dim=-1))  # [nb, pbs, num_tiles]
    e4m3 = (tiles / scales[..., None]).to(torch.float8_e4m3fn).view(torch.uint8)
    e4m3 = e4m3.reshape(num_blocks, pbs, quantized)
    rope = x[..., quantized:].contiguous().view(torch.uint8)  # [nb, pbs, 128]
    if fmt.name == "v32_fp8":
        cache[:, :, 0, :512] = e4m3
        cache[:, :, 0, 512:528] = scales.contiguous().view(torch.uint8)
        cache[:, :, 0, 528:] = rope
        return cache
    stride = cache.stride(0)
    flat = cache.as_strided((num_blocks, stride), (stride, 1))
    data = flat[:, : pbs * 576].view(num_blocks, pbs, 576)
    data[..., :448] = e4m3
    data[..., 448:] = rope
    exponents = torch.frexp(scales)[1] - 1 + 127  # scale = 2^(exponent - 1): ue8m0 byte
    scale_rows = flat[:, pbs * 576: pbs * 584].view(num_blocks, pbs, 8)
    scale_rows[..., :7] = exponents.to(torch.uint8)
    return cache


def sparse_decode_reference(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    *,
    topk_length: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    kv_format: Optional[str] = None,
    softmax_scale: Optional[float] = None,
    d_v: int = 512,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """SPEC §3 in float64 on the dequantized caches (arguments as
    :func:`sparse_mla.sparse_decode`).

    Returns:
        ``(out [b, s_q, h_q, d_v], lse [b, s_q, h_q])`` float32 on q's device.
    """
    b, s_q, h_q, d_qk = q.shape
    scale = d_qk ** -0.5 if softmax_scale is None else softmax_scale

    def gather(cache, lists, lengths):
        rows = dequantize_kv_cache_reference(cache, kv_format).to(torch.float64)
        rows = rows.reshape(-1, rows.shape[-1])  # [num_slots, d_qk]
        lists = lists.to(torch.int64).reshape(b * s_q, -1)
        valid = (lists >= 0) & (lists < rows.shape[0])
        if lengths is not None:
            per_query = lengths.to(torch.int64)
            per_query = (per_query[:, None].expand(b, s_q) if per_query.dim() == 1
                         else per_query).reshape(b * s_q)
            positions = torch.arange(lists.shape[1], device=lists.device)
            valid &= positions[None, :] < per_query[:, None]
        return rows[lists.clamp(0, rows.shape[0] - 1)], valid

    rows, valid = gather(kv_cache, indices, topk_length)
    if extra_kv_cache is not None:
        extra_rows, extra_valid = gather(extra_kv_cache, extra_indices, extra_topk_length)
        rows = torch.cat([rows, extra_rows], dim=1)
        valid = torch.cat([valid, extra_valid], dim=1)
    out, _, lse = _attend(q.reshape(b * s_q, h_q, d_qk).to(torch.float64), rows, valid, scale,
                          d_v, attn_sink)
    return out.reshape(b, s_q, h_q, d_v).float(), lse.reshape(b, s_q, h_q).float()


__all__ = [
    "dequantize_kv_cache_reference",
    "quantize_kv_cache_reference",
    "sparse_decode_reference",
    "sparse_prefill_reference",
]
