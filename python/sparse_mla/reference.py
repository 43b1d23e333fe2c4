"""The definitions of SPEC §2–§4 in plain torch, for tests: slow, float64, independent of the
compiled library (it dequantizes caches and quantizes rows with its own torch code).

- :func:`sparse_prefill_reference`, :func:`sparse_decode_reference` — the two operations;
  outputs in float32 (out unrounded), accumulation in float64.
- :func:`dequantize_kv_cache_reference` — cache bytes → fp32 rows (``code value * scale`` in
  fp32), every format and page layout.
- :func:`quantize_kv_cache_reference` — the reference quantizer byte for byte: FlashMLA's for
  ``v32_fp8`` / ``v4_fp8`` (finite input), SPEC §4's for the V4.1 records ``v41_fp8`` /
  ``v41_fp4`` (any input: NaN, ±inf, huge, tiny), in both page layouts.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from sparse_mla.kv_cache import empty_kv_cache, infer_kv_cache_format, kv_cache_format

_E4M3_MAX = 448.0
_MIN_SCALE = 1e-4

# V4.1 records: (data bytes, scale bytes, values per scale) of a token.
_V41_PARTS = {"v41_fp8": (512, 16, 32), "v41_fp4": (256, 32, 16)}
# e2m1 code -> value: sign bit 3, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


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
    # A NaN score (a valid slot whose row holds NaN) makes lse and out NaN; max_logits skips it, as
    # the library's C++ reference (std::max) and its kernels' running max (fmaxf) do.
    max_logits = scores.masked_fill(scores.isnan(), -math.inf).amax(dim=-1)
    lse = torch.logsumexp(scores, dim=-1)
    empty = ~valid.any(dim=-1)  # [n]: no valid slot
    # Empty rows have lse -inf (exp(-inf - -inf) is NaN): their weights are 0.
    weights = torch.exp(scores - lse[..., None]).masked_fill(empty[:, None, None], 0.0)
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


def _e2m1_to_float(codes: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=codes.device)
    return table[(codes & 0xF).to(torch.int64)]


def _v41_parts(raw: torch.Tensor, name: str, layout: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """The data bytes ``[nb, pbs, data]`` and scale bytes ``[nb, pbs, scales]`` of every token of
    a V4.1 cache, ``raw`` being its ``[nb, pbs, bytes_per_token]`` token bytes."""
    num_blocks, pbs, record = raw.shape
    data_bytes, scale_bytes, _ = _V41_PARTS[name]
    if layout == "token_interleaved":  # record t: data, then its scales
        return raw[..., :data_bytes], raw[..., data_bytes:]
    # page_split: a block's first pbs * record bytes hold every data row, then every scale row.
    block = raw.contiguous().view(num_blocks, pbs * record)
    data = block[:, : pbs * data_bytes].view(num_blocks, pbs, data_bytes)
    return data, block[:, pbs * data_bytes:].view(num_blocks, pbs, scale_bytes)


def _dequantize_v41(raw: torch.Tensor, name: str, layout: str) -> torch.Tensor:
    num_blocks, pbs, _ = raw.shape
    data, scale_bytes = _v41_parts(raw, name, layout)
    if name == "v41_fp8":
        values = _e4m3_to_float(data).view(num_blocks, pbs, 16, 32)
        scales = _ue8m0_to_float(scale_bytes)
    else:
        # Byte j holds value 2j in its low nibble and value 2j + 1 in its high nibble.
        codes = torch.stack([data & 0xF, data >> 4], dim=-1).view(num_blocks, pbs, 512)
        values = _e2m1_to_float(codes).view(num_blocks, pbs, 32, 16)
        scales = _e4m3_to_float(scale_bytes)
    return (values * scales[..., None]).view(num_blocks, pbs, 512)[:, :, None, :]


def dequantize_kv_cache_reference(
    cache: torch.Tensor, kv_format: Optional[str] = None, kv_layout: Optional[str] = None
) -> torch.Tensor:
    """Decodes a paged cache with torch ops only (SPEC §4).

    Args:
        cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` bytes (any block stride),
            or bf16 rows for the bf16 format.
        kv_format: inferred when omitted.
        kv_layout: ``"page_split"`` / ``"token_interleaved"``; default the format's own.

    Returns:
        ``[num_blocks, page_block_size, 1, d_qk]`` float32 (``code value * scale`` in fp32).
    """
    name = kv_format or infer_kv_cache_format(cache)
    layout = kv_cache_format(name).layout(kv_layout)
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
    if name in _V41_PARTS:
        return _dequantize_v41(raw, name, layout)
    raise ValueError(f"kv_format = {name!r} is not a KV-cache format")


def _tile_scales(amax: torch.Tensor) -> torch.Tensor:
    """Per-tile power-of-two scale: ``max(amax / 448, 1e-4)`` rounded up to a power of two."""
    raw = torch.clamp_min(amax / _E4M3_MAX, _MIN_SCALE)
    mantissa, exponent = torch.frexp(raw)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    return torch.ldexp(torch.ones_like(raw), exponent)


def _float_to_e4m3_bytes(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> e4m3fn codes, round to nearest even; |v| >= 448 (and ±inf) saturates to ±448,
    NaN (of either sign) is 0x7f."""
    codes = v.clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(torch.isnan(v), torch.full_like(codes, 0x7F), codes)


def _float_to_e2m1(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> e2m1 codes (uint8, 0..15) as ``cvt.rn.satfinite.e2m1x2.f32``: round to nearest,
    ties to the even code, saturating at ±6 (±inf too), the sign kept (-0 is code 8); NaN -> 0.

    Magnitude code k covers (0, 0.5, 1, 1.5, 2, 3, 4, 6)[k]; the midpoints 0.25, 0.75, 1.25,
    1.75, 2.5, 3.5, 5 go to the even neighbour (codes 0, 2, 2, 4, 4, 6, 6)."""
    a = v.abs()
    magnitude = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) +
                 (a > 2.5) + (a >= 3.5) + (a > 5.0))
    codes = magnitude.to(torch.uint8) | (torch.signbit(v).to(torch.uint8) << 3)
    return torch.where(torch.isnan(v), torch.zeros_like(codes), codes)


def _pow2_ceil(raw: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= raw (> 0); NaN and +inf stay."""
    mantissa, exponent = torch.frexp(raw)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    return torch.where(torch.isfinite(raw), torch.ldexp(torch.ones_like(raw), exponent), raw)


def _quantize_v41(x: torch.Tensor, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """bf16 rows ``[nb, pbs, 512]`` -> (data bytes ``[nb, pbs, data]``, scale bytes
    ``[nb, pbs, scales]``) of SPEC §4's V4.1 quantizer."""
    num_blocks, pbs, _ = x.shape
    _, num_scales, tile = _V41_PARTS[name]
    tiles = x.to(torch.float32).reshape(num_blocks, pbs, num_scales, tile)
    amax = tiles.abs().amax(dim=-1)  # NaN if the tile holds one
    if name == "v41_fp8":
        # ceil_pow2(max(amax / 448, 1e-4)): NaN / +inf amax -> NaN / +inf scale, ue8m0 0xff.
        scales = _pow2_ceil(torch.clamp_min(amax / _E4M3_MAX, _MIN_SCALE))
        exponent = torch.frexp(scales)[1] - 1 + 127  # scale = 2^(exponent - 1)
        scale_bytes = torch.where(torch.isfinite(scales), exponent,
                                  torch.full_like(exponent, 0xFF)).to(torch.uint8)
        codes = _float_to_e4m3_bytes(tiles / scales[..., None])
        return codes.reshape(num_blocks, pbs, 512), scale_bytes
    # v41_fp4: s = e4m3(clamp(amax / 6, 2^-9, 448)) (NaN amax -> NaN scale), codes e2m1(x / s).
    scale_bytes = _float_to_e4m3_bytes((amax / 6.0).clamp(2.0 ** -9, _E4M3_MAX))
    scales = _e4m3_to_float(scale_bytes)
    codes = _float_to_e2m1(tiles / scales[..., None]).reshape(num_blocks, pbs, 256, 2)
    return codes[..., 0] | (codes[..., 1] << 4), scale_bytes


def quantize_kv_cache_reference(
    kv: torch.Tensor,
    kv_format: str,
    block_stride: Optional[int] = None,
    kv_layout: Optional[str] = None,
) -> torch.Tensor:
    """The reference quantizer in torch (padding bytes zero): FlashMLA's for ``v32_fp8`` /
    ``v4_fp8`` (finite input), SPEC §4's for ``v41_fp8`` / ``v41_fp4`` (any input).

    Args:
        kv: ``[num_blocks, page_block_size, 1, d_qk]`` bf16.
        kv_format: ``"v32_fp8"``, ``"v4_fp8"``, ``"bf16"``, ``"v41_fp8"`` or ``"v41_fp4"``.
        block_stride: bytes between blocks (default: the smallest legal stride).
        kv_layout: ``"page_split"`` / ``"token_interleaved"``; default the format's own.

    Returns:
        ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8.
    """
    fmt = kv_cache_format(kv_format)
    layout = fmt.layout(kv_layout)
    num_blocks, pbs, _, d_qk = kv.shape
    cache = empty_kv_cache(num_blocks, pbs, fmt, d_qk=d_qk, block_stride=block_stride,
                           kv_layout=layout, device=kv.device)
    x = kv[:, :, 0, :]
    if fmt.name in _V41_PARTS:
        data, scale_bytes = _quantize_v41(x, fmt.name)
        data_bytes = data.shape[-1]
        if layout == "token_interleaved":
            cache[:, :, 0, :data_bytes] = data
            cache[:, :, 0, data_bytes:] = scale_bytes
            return cache
        stride = cache.stride(0)
        flat = cache.as_strided((num_blocks, stride), (stride, 1))
        flat[:, : pbs * data_bytes] = data.reshape(num_blocks, -1)
        flat[:, pbs * data_bytes: pbs * fmt.token_bytes()] = scale_bytes.reshape(num_blocks, -1)
        return cache
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
    kv_layout: Optional[str] = None,
    extra_kv_format: Optional[str] = None,
    extra_kv_layout: Optional[str] = None,
    softmax_scale: Optional[float] = None,
    d_v: int = 512,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """SPEC §3 in float64 on the dequantized caches (arguments as
    :func:`sparse_mla.sparse_decode`; each cache decoded in its own format and layout, so a
    ``v41_fp8`` main cache mixes with a ``v41_fp4`` extra cache).

    Returns:
        ``(out [b, s_q, h_q, d_v], lse [b, s_q, h_q])`` float32 on q's device.
    """
    b, s_q, h_q, d_qk = q.shape
    scale = d_qk ** -0.5 if softmax_scale is None else softmax_scale

    def gather(cache, lists, lengths, fmt, layout):
        rows = dequantize_kv_cache_reference(cache, fmt, layout).to(torch.float64)
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

    rows, valid = gather(kv_cache, indices, topk_length, kv_format, kv_layout)
    if extra_kv_cache is not None:
        extra_format = kv_cache_format(extra_kv_format or infer_kv_cache_format(extra_kv_cache))
        if extra_kv_layout is None and kv_layout in extra_format.layouts:
            extra_kv_layout = kv_layout  # the caches of one model share a layout
        extra_rows, extra_valid = gather(extra_kv_cache, extra_indices, extra_topk_length,
                                         extra_format.name, extra_kv_layout)
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
