"""Paged KV caches (SPEC §4): format facts, allocation, quantization and dequantization.

A cache is the tensor FlashMLA takes: ``[num_blocks, page_block_size, 1, bytes_per_token]`` of
``torch.uint8`` (``int8`` and ``float8_e4m3fn`` are accepted too), token rows packed inside a
block, blocks ``cache.stride(0)`` bytes apart. For ``v32_fp8`` and ``bf16`` the block stride may
exceed ``page_block_size * bytes_per_token``; for ``v4_fp8`` it is exactly
``ceil(page_block_size * 584 / 576) * 576`` (:func:`kv_cache_block_stride`): its blocks keep the
scales after all their rows, so a view keeping fewer rows than its blocks hold
(``cache[:, :k]``) cannot be told from a padded block and both are rejected. The ``bf16`` format
may also be passed as ``[num_blocks, page_block_size, 1, d_qk]`` bf16.

===========  ===========  ====  ==============================================================
format       bytes/token  d_qk  layout
===========  ===========  ====  ==============================================================
``v32_fp8``  656          576   per token: 512 e4m3 | 4 fp32 scales | 64 bf16 RoPE
``v4_fp8``   584          512   per block: rows of 448 e4m3 + 64 bf16 RoPE (576 B), then rows
                                of 7 ue8m0 scales + 1 pad (8 B); block stride multiple of 576
``bf16``     2 * d_qk     any   d_qk bf16 values per token (d_qk 512 or 576)
===========  ===========  ====  ==============================================================

Quantization runs the library's host codec (FlashMLA's reference quantizer: per tile
``s = max(amax / 448, 1e-4)`` rounded up to a power of two, ``e4m3(x / s)`` round-to-nearest-even);
CUDA tensors are staged through host memory.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import torch

_BYTE_DTYPES = (torch.uint8, torch.int8, torch.float8_e4m3fn)


@dataclasses.dataclass(frozen=True)
class KvCacheFormat:
    """Facts about one KV-cache format.

    Attributes:
        name: ``"v32_fp8"``, ``"v4_fp8"`` or ``"bf16"``.
        d_qk: head dimension the format stores (``None``: any of 512, 576 — bf16).
        bytes_per_token: bytes of one token (``None``: ``2 * d_qk`` — bf16).
        block_alignment: the block stride in bytes must be a multiple of this.
    """

    name: str
    d_qk: Optional[int]
    bytes_per_token: Optional[int]
    block_alignment: int

    def token_bytes(self, d_qk: Optional[int] = None) -> int:
        """Bytes per token; ``d_qk`` is needed (512 or 576) for the bf16 format only."""
        if self.bytes_per_token is not None:
            return self.bytes_per_token
        if d_qk not in (512, 576):
            raise ValueError(f"{self.name}: d_qk = {d_qk} must be 512 or 576")
        return 2 * d_qk

    def head_dim(self, d_qk: Optional[int] = None) -> int:
        """d_qk of a cache of this format (``d_qk`` given for bf16)."""
        if self.d_qk is not None:
            if d_qk is not None and d_qk != self.d_qk:
                raise ValueError(f"{self.name} stores d_qk = {self.d_qk}, not {d_qk}")
            return self.d_qk
        self.token_bytes(d_qk)
        assert d_qk is not None
        return d_qk


KV_CACHE_FORMATS = {
    "v32_fp8": KvCacheFormat("v32_fp8", 576, 656, 1),
    "v4_fp8": KvCacheFormat("v4_fp8", 512, 584, 576),
    "bf16": KvCacheFormat("bf16", None, None, 1),
}


def kv_cache_format(name: Union[str, KvCacheFormat]) -> KvCacheFormat:
    """The :class:`KvCacheFormat` called ``name``; ValueError for an unknown name."""
    if isinstance(name, KvCacheFormat):
        return name
    try:
        return KV_CACHE_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"kv_format = {name!r} is not a KV-cache format ({', '.join(KV_CACHE_FORMATS)})"
        ) from None


def infer_kv_cache_format(cache: torch.Tensor) -> str:
    """The format of a cache tensor from its dtype and last dimension.

    ``[..., 656]`` bytes → ``v32_fp8``, ``[..., 584]`` → ``v4_fp8``, ``[..., 1024 | 1152]``
    bytes or a bf16 tensor → ``bf16``.
    """
    if cache.dtype == torch.bfloat16:
        return "bf16"
    if cache.dtype not in _BYTE_DTYPES:
        raise ValueError(
            f"cache has dtype {cache.dtype}; a cache is uint8, int8 or float8_e4m3fn bytes "
            "(or bf16 rows)"
        )
    last = cache.shape[-1] if cache.dim() else 0
    for fmt in KV_CACHE_FORMATS.values():
        if fmt.bytes_per_token == last:
            return fmt.name
    if last in (1024, 1152):
        return "bf16"
    raise ValueError(
        f"cache.shape[-1] (bytes_per_token) = {last} matches no KV-cache format "
        "(656 v32_fp8, 584 v4_fp8, 1024 or 1152 bf16)"
    )


def kv_cache_block_stride(
    kv_format: Union[str, KvCacheFormat], page_block_size: int, d_qk: Optional[int] = None
) -> int:
    """The smallest legal block stride in bytes for ``page_block_size`` tokens per block.

    ``page_block_size * bytes_per_token`` rounded up to the format's block alignment (576 for
    ``v4_fp8``: e.g. 64 tokens → 37440 bytes).
    """
    fmt = kv_cache_format(kv_format)
    if page_block_size < 1:
        raise ValueError(f"page_block_size = {page_block_size} must be >= 1")
    used = page_block_size * fmt.token_bytes(d_qk)
    return -(-used // fmt.block_alignment) * fmt.block_alignment


def empty_kv_cache(
    num_blocks: int,
    page_block_size: int,
    kv_format: Union[str, KvCacheFormat],
    *,
    d_qk: Optional[int] = None,
    block_stride: Optional[int] = None,
    device: Union[str, torch.device, None] = None,
) -> torch.Tensor:
    """A zero-filled cache ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8.

    Args:
        num_blocks: page blocks.
        page_block_size: tokens per block.
        kv_format: format name.
        d_qk: 512 or 576, for the bf16 format only.
        block_stride: bytes between blocks (default :func:`kv_cache_block_stride`); must be at
            least that and a multiple of the format's block alignment, and exactly that for
            ``v4_fp8``.
        device: where to allocate.

    Returns:
        A view with ``stride(0) == block_stride`` over ``num_blocks * block_stride`` bytes.
    """
    fmt = kv_cache_format(kv_format)
    token_bytes = fmt.token_bytes(d_qk)
    minimum = kv_cache_block_stride(fmt, page_block_size, d_qk)
    stride = minimum if block_stride is None else block_stride
    if fmt.name == "v4_fp8" and stride != minimum:
        raise ValueError(
            f"block_stride = {stride}: a v4_fp8 block stride is exactly {minimum} for "
            f"page_block_size {page_block_size} (its scales follow all the rows of the block)"
        )
    if stride < minimum or stride % fmt.block_alignment:
        raise ValueError(
            f"block_stride = {stride} must be >= {minimum} and a multiple of "
            f"{fmt.block_alignment} for {fmt.name} with page_block_size {page_block_size}"
        )
    if num_blocks < 0:
        raise ValueError(f"num_blocks = {num_blocks} must be >= 0")
    storage = torch.zeros(num_blocks * stride, dtype=torch.uint8, device=device)
    return storage.as_strided(
        (num_blocks, page_block_size, 1, token_bytes), (stride, token_bytes, token_bytes, 1)
    )


def quantize_kv_cache(
    kv: torch.Tensor,
    kv_format: Union[str, KvCacheFormat],
    *,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Quantizes (or, for ``bf16``, copies) KV rows into a paged cache.

    Args:
        kv: ``[num_blocks, page_block_size, 1, d_qk]`` bf16 (last dim contiguous).
        kv_format: ``"v32_fp8"`` (d_qk 576), ``"v4_fp8"`` (d_qk 512) or ``"bf16"``.
        out: optional cache to write, ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8
            on kv's device (e.g. from :func:`empty_kv_cache`); its storage must hold
            ``num_blocks * out.stride(0)`` bytes: every byte of every block (padding included)
            is written.

    Returns:
        The cache (``out`` when given), on kv's device.
    """
    fmt = kv_cache_format(kv_format)
    if kv.dim() != 4:
        raise ValueError(
            f"quantize_kv_cache: kv must have shape [num_blocks, page_block_size, 1, d_qk], "
            f"got {list(kv.shape)}"
        )
    num_blocks, page_block_size, _, d_qk = kv.shape
    if out is None:
        out = empty_kv_cache(num_blocks, page_block_size, fmt, d_qk=d_qk, device=kv.device)
    if out.device != kv.device:
        raise ValueError(f"quantize_kv_cache: out is on {out.device} but kv is on {kv.device}")
    if kv.device.type == "cpu":
        torch.ops.sparse_mla.quantize_kv_cache(kv, fmt.name, out)
        return out
    host = _host_copy_layout(out, fmt, d_qk)
    torch.ops.sparse_mla.quantize_kv_cache(kv.cpu(), fmt.name, host)
    out.copy_(host.view(out.dtype))
    return out


def dequantize_kv_cache(
    cache: torch.Tensor,
    kv_format: Union[str, KvCacheFormat, None] = None,
    *,
    dtype: torch.dtype = torch.bfloat16,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Decodes every token of a paged cache.

    Args:
        cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` (see the module doc).
        kv_format: format name; inferred from the cache's dtype and last dim when omitted.
        dtype: ``torch.bfloat16`` or ``torch.float32`` (exact: ``e4m3 * scale`` in fp32).
        out: optional ``[num_blocks, page_block_size, 1, d_qk]`` tensor of ``dtype``.

    Returns:
        ``[num_blocks, page_block_size, 1, d_qk]`` on the cache's device.
    """
    name = infer_kv_cache_format(cache) if kv_format is None else kv_cache_format(kv_format).name
    fmt = kv_cache_format(name)
    if cache.dim() != 4:
        raise ValueError(
            "dequantize_kv_cache: cache must have shape "
            f"[num_blocks, page_block_size, 1, bytes_per_token], got {list(cache.shape)}"
        )
    last = cache.shape[3] * (2 if cache.dtype == torch.bfloat16 else 1)
    d_qk = fmt.d_qk if fmt.d_qk is not None else last // 2
    shape = (cache.shape[0], cache.shape[1], 1, d_qk)
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=cache.device)
    if cache.device.type == "cpu":
        torch.ops.sparse_mla.dequantize_kv_cache(cache, name, out)
        return out
    host_cache = _host_copy_layout(cache, fmt, d_qk)
    host_cache.copy_(cache.view(torch.uint8))
    host_out = torch.empty(out.shape, dtype=out.dtype)
    torch.ops.sparse_mla.dequantize_kv_cache(host_cache, name, host_out)
    out.copy_(host_out)
    return out


def _host_copy_layout(cache: torch.Tensor, fmt: KvCacheFormat, d_qk: int) -> torch.Tensor:
    """A zeroed host uint8 cache with the block stride of device cache ``cache`` (for staging)."""
    minimum = kv_cache_block_stride(fmt, cache.shape[1], d_qk)
    stride = cache.stride(0) * cache.element_size() if cache.shape[0] > 1 else minimum
    return empty_kv_cache(cache.shape[0], cache.shape[1], fmt, d_qk=d_qk, block_stride=stride)
