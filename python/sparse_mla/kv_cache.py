"""Paged KV caches (SPEC §4): format facts, allocation, quantization, dequantization and the
engine's cache writer.

A cache is the tensor FlashMLA takes: ``[num_blocks, page_block_size, 1, bytes_per_token]`` of
``torch.uint8`` (``int8`` and ``float8_e4m3fn`` are accepted too), token rows packed inside a
block, blocks ``cache.stride(0)`` bytes apart. The ``bf16`` format may also be passed as
``[num_blocks, page_block_size, 1, d_qk]`` bf16.

===========  ===========  ====  ==============================================================
format       bytes/token  d_qk  token record
===========  ===========  ====  ==============================================================
``v32_fp8``  656          576   512 e4m3 | 4 fp32 scales (one per 128) | 64 bf16 RoPE
``v4_fp8``   584          512   448 e4m3 + 64 bf16 RoPE (576 B) | 7 ue8m0 scales + 1 pad (8 B)
``v41_fp8``  528          512   512 e4m3 (RoPE included) | 16 ue8m0 scales (one per 32)
``v41_fp4``  288          512   512 e2m1, two per byte, even index in the low nibble (256 B) |
                                32 e4m3 scales (one per 16)
``bf16``     2 * d_qk     any   d_qk bf16 values (d_qk 512 or 576)
===========  ===========  ====  ==============================================================

A block arranges its tokens' records in one of two **page layouts** (``kv_layout``), which bytes
per token cannot tell apart, so a call names it (default: the format's own):

- ``token_interleaved`` (``v32_fp8``, ``bf16``; ``v41_*`` optionally, as FlashMLA's SM100 kernels
  store them): each token's record contiguous at ``t * bytes_per_token``. The block stride may
  exceed ``page_block_size * bytes_per_token``; it must be a multiple of the record size for
  the V4.1 records.
- ``page_split`` (``v4_fp8``; the default of ``v41_*``, as vLLM and SGLang store them): every
  token's data row first (576 / 512 / 256 B), then every token's scale row (8 / 16 / 32 B). The
  block stride is exactly ``page_block_size * bytes_per_token`` rounded up to 576 / 512 / 256
  bytes (:func:`kv_cache_block_stride`): the scales follow all the rows of the block, so a view
  keeping fewer rows than its blocks hold (``cache[:, :k]``) cannot be told from a padded block,
  and both are rejected.

The codec is the library's, on the tensors' device (CUDA tensors: device kernels on torch's
current stream). Its quantizer is the reference one: FP8 per tile ``s = max(amax / 448, 1e-4)``
rounded up to a power of two, ``e4m3(x / s)`` round-to-nearest-even; FP4 (``v41_fp4``) per 16
values ``s = e4m3(clamp(amax / 6, 2^-9, 448))``, ``e2m1(x / s)`` round-to-nearest-even and
saturated, a NaN in a tile making its scale NaN and NaN codes stored as 0.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

import torch

_BYTE_DTYPES = (torch.uint8, torch.int8, torch.float8_e4m3fn)

KV_LAYOUTS = ("page_split", "token_interleaved")


@dataclasses.dataclass(frozen=True)
class KvCacheFormat:
    """Facts about one KV-cache format.

    Attributes:
        name: ``"v32_fp8"``, ``"v4_fp8"``, ``"bf16"``, ``"v41_fp8"`` or ``"v41_fp4"``.
        d_qk: head dimension the format stores (``None``: any of 512, 576 — bf16).
        bytes_per_token: bytes of one token (``None``: ``2 * d_qk`` — bf16).
        layouts: the page layouts the format comes in, its default first.
        block_alignments: per layout, the block stride in bytes must be a multiple of this.
    """

    name: str
    d_qk: Optional[int]
    bytes_per_token: Optional[int]
    layouts: Tuple[str, ...]
    block_alignments: Tuple[int, ...]

    @property
    def default_layout(self) -> str:
        """The layout a call without ``kv_layout`` reads."""
        return self.layouts[0]

    @property
    def block_alignment(self) -> int:
        """The block alignment of the default layout."""
        return self.block_alignments[0]

    def layout(self, kv_layout: Optional[str] = None, arg: str = "kv_layout") -> str:
        """``kv_layout`` checked against this format (``None`` or ``"default"``: the default
        layout); ValueError naming ``arg`` and the value for an unknown name or a layout the
        format lacks."""
        if kv_layout is None or kv_layout == "default":
            return self.default_layout
        if kv_layout not in KV_LAYOUTS:
            raise ValueError(
                f"{arg} = {kv_layout!r} is not a KV-cache layout ({', '.join(KV_LAYOUTS)})"
            )
        if kv_layout not in self.layouts:
            raise ValueError(
                f"{arg} = {kv_layout!r} is not a layout of {self.name} (its layout is "
                f"{self.default_layout})"
            )
        return kv_layout

    def alignment(self, kv_layout: Optional[str] = None) -> int:
        """The block alignment in bytes of ``kv_layout`` (default: the format's own)."""
        return self.block_alignments[self.layouts.index(self.layout(kv_layout))]

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
    "v32_fp8": KvCacheFormat("v32_fp8", 576, 656, ("token_interleaved",), (1,)),
    "v4_fp8": KvCacheFormat("v4_fp8", 512, 584, ("page_split",), (576,)),
    "bf16": KvCacheFormat("bf16", None, None, ("token_interleaved",), (1,)),
    "v41_fp8": KvCacheFormat("v41_fp8", 512, 528, KV_LAYOUTS, (512, 528)),
    "v41_fp4": KvCacheFormat("v41_fp4", 512, 288, KV_LAYOUTS, (256, 288)),
}


def kv_cache_format(name: Union[str, KvCacheFormat], arg: str = "kv_format") -> KvCacheFormat:
    """The :class:`KvCacheFormat` called ``name``; ValueError naming ``arg`` for an unknown name."""
    if isinstance(name, KvCacheFormat):
        return name
    try:
        return KV_CACHE_FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"{arg} = {name!r} is not a KV-cache format ({', '.join(KV_CACHE_FORMATS)})"
        ) from None


def infer_kv_cache_format(cache: torch.Tensor) -> str:
    """The format of a cache tensor from its dtype and last dimension.

    ``[..., 656]`` bytes → ``v32_fp8``, ``[..., 584]`` → ``v4_fp8``, ``[..., 528]`` →
    ``v41_fp8``, ``[..., 288]`` → ``v41_fp4``, ``[..., 1024 | 1152]`` bytes or a bf16 tensor →
    ``bf16``. (The page layout cannot be inferred: pass ``kv_layout``.)
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
        "(656 v32_fp8, 584 v4_fp8, 528 v41_fp8, 288 v41_fp4, 1024 or 1152 bf16)"
    )


def kv_cache_block_stride(
    kv_format: Union[str, KvCacheFormat],
    page_block_size: int,
    d_qk: Optional[int] = None,
    kv_layout: Optional[str] = None,
) -> int:
    """The smallest legal block stride in bytes for ``page_block_size`` tokens per block.

    ``page_block_size * bytes_per_token`` rounded up to the layout's block alignment: 576 for
    ``v4_fp8`` (64 tokens → 37440 bytes), 512 / 256 for ``v41_fp8`` / ``v41_fp4`` page_split
    (61 tokens → 32256 / 17664 bytes), the record size for their token_interleaved layout.
    For page_split layouts it is also the largest: their block stride is exactly this.
    """
    fmt = kv_cache_format(kv_format)
    alignment = fmt.alignment(kv_layout)
    if page_block_size < 1:
        raise ValueError(f"page_block_size = {page_block_size} must be >= 1")
    used = page_block_size * fmt.token_bytes(d_qk)
    return -(-used // alignment) * alignment


def empty_kv_cache(
    num_blocks: int,
    page_block_size: int,
    kv_format: Union[str, KvCacheFormat],
    *,
    d_qk: Optional[int] = None,
    block_stride: Optional[int] = None,
    kv_layout: Optional[str] = None,
    device: Union[str, torch.device, None] = None,
) -> torch.Tensor:
    """A zero-filled cache ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8.

    Args:
        num_blocks: page blocks.
        page_block_size: tokens per block.
        kv_format: format name.
        d_qk: 512 or 576, for the bf16 format only.
        block_stride: bytes between blocks (default :func:`kv_cache_block_stride`); must be at
            least that and a multiple of the layout's block alignment, and exactly that for a
            page_split layout.
        kv_layout: ``"page_split"`` or ``"token_interleaved"`` (default: the format's own).
        device: where to allocate.

    Returns:
        A view with ``stride(0) == block_stride`` over ``num_blocks * block_stride`` bytes.
    """
    fmt = kv_cache_format(kv_format)
    layout = fmt.layout(kv_layout)
    token_bytes = fmt.token_bytes(d_qk)
    minimum = kv_cache_block_stride(fmt, page_block_size, d_qk, layout)
    stride = minimum if block_stride is None else block_stride
    if layout == "page_split" and stride != minimum:
        which = f"{fmt.name} page_split" if len(fmt.layouts) > 1 else fmt.name
        raise ValueError(
            f"block_stride = {stride}: a {which} block stride is exactly {minimum} for "
            f"page_block_size {page_block_size} (its scales follow all the rows of the block)"
        )
    alignment = fmt.alignment(layout)
    if stride < minimum or stride % alignment:
        raise ValueError(
            f"block_stride = {stride} must be >= {minimum} and a multiple of "
            f"{alignment} for {fmt.name} {layout} with page_block_size {page_block_size}"
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
    kv_layout: Optional[str] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Quantizes (or, for ``bf16``, copies) KV rows into a paged cache, on kv's device.

    Args:
        kv: ``[num_blocks, page_block_size, 1, d_qk]`` bf16 (last dim contiguous).
        kv_format: ``"v32_fp8"`` (d_qk 576), ``"v4_fp8"``, ``"v41_fp8"``, ``"v41_fp4"`` (d_qk
            512) or ``"bf16"``.
        kv_layout: ``"page_split"`` or ``"token_interleaved"`` (default: the format's own).
        out: optional cache to write, ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8
            on kv's device (e.g. from :func:`empty_kv_cache` with the same ``kv_layout``); its
            storage must hold ``num_blocks * out.stride(0)`` bytes: every byte of every block
            (padding included) is written.

    Returns:
        The cache (``out`` when given), on kv's device.
    """
    fmt = kv_cache_format(kv_format)
    layout = fmt.layout(kv_layout)
    if kv.dim() != 4:
        raise ValueError(
            f"quantize_kv_cache: kv must have shape [num_blocks, page_block_size, 1, d_qk], "
            f"got {list(kv.shape)}"
        )
    num_blocks, page_block_size, _, d_qk = kv.shape
    if fmt.d_qk is not None and d_qk != fmt.d_qk:  # checked before the cache is allocated
        raise ValueError(
            f"quantize_kv_cache: kv.shape[3] (d_qk) = {d_qk}, but {fmt.name} stores d_qk = "
            f"{fmt.d_qk}"
        )
    if out is None:
        out = empty_kv_cache(num_blocks, page_block_size, fmt, d_qk=d_qk, kv_layout=layout,
                             device=kv.device)
    if out.device != kv.device:
        raise ValueError(f"quantize_kv_cache: out is on {out.device} but kv is on {kv.device}")
    _QUANTIZE(kv, fmt.name, out, kv_layout=layout)
    return out


def dequantize_kv_cache(
    cache: torch.Tensor,
    kv_format: Union[str, KvCacheFormat, None] = None,
    *,
    kv_layout: Optional[str] = None,
    dtype: torch.dtype = torch.bfloat16,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Decodes every token of a paged cache, on the cache's device.

    Args:
        cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` (see the module doc).
        kv_format: format name; inferred from the cache's dtype and last dim when omitted.
        kv_layout: ``"page_split"`` or ``"token_interleaved"`` (default: the format's own).
        dtype: ``torch.bfloat16`` or ``torch.float32`` (exact: ``code value * scale`` in fp32).
        out: optional ``[num_blocks, page_block_size, 1, d_qk]`` tensor of ``dtype``.

    Returns:
        ``[num_blocks, page_block_size, 1, d_qk]`` on the cache's device.
    """
    name = infer_kv_cache_format(cache) if kv_format is None else kv_cache_format(kv_format).name
    fmt = kv_cache_format(name)
    layout = fmt.layout(kv_layout)
    if cache.dim() != 4:
        raise ValueError(
            "dequantize_kv_cache: cache must have shape "
            f"[num_blocks, page_block_size, 1, bytes_per_token], got {list(cache.shape)}"
        )
    last = cache.shape[3] * (2 if cache.dtype == torch.bfloat16 else 1)
    d_qk = fmt.d_qk if fmt.d_qk is not None else last // 2
    if out is None:
        out = torch.empty((cache.shape[0], cache.shape[1], 1, d_qk), dtype=dtype,
                          device=cache.device)
    _DEQUANTIZE(cache, name, out, kv_layout=layout)
    return out


def write_kv_cache(
    rows: torch.Tensor,
    slot_mapping: torch.Tensor,
    cache: torch.Tensor,
    kv_format: Union[str, KvCacheFormat, None] = None,
    kv_layout: Optional[str] = None,
) -> torch.Tensor:
    """Quantizes new tokens' rows into a paged cache at their slots: the call an engine makes
    every step after computing the new tokens' latents.

    Args:
        rows: ``[n, d_qk]`` bf16 (row stride any, last dim contiguous).
        slot_mapping: ``[n]`` int32 physical slots ``block * page_block_size + offset``; a slot
            < 0 is skipped (padding tokens). A slot past the cache is an error on the CPU and
            skipped on CUDA (a kernel cannot report it without a synchronisation).
        cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` on rows' device, written
            in place: each written token's record gets the bytes :func:`quantize_kv_cache` would
            give it, no other byte changes. A slot named by several rows gets the last of them
            on the CPU, one of them on CUDA.
        kv_format: format name; inferred from the cache's dtype and last dim when omitted.
        kv_layout: ``"page_split"`` or ``"token_interleaved"`` (default: the format's own).

    Returns:
        ``cache``. On CUDA the write is one kernel on torch's current stream with no allocation
        and no synchronisation, so it can be captured in a CUDA graph (a packed page_split copy,
        as ``clone()`` makes, is written through a staging buffer instead: keep caches as views).
    """
    # A string goes to the operator as it is: it names the operation and a bad value.
    name = kv_format.name if isinstance(kv_format, KvCacheFormat) else kv_format
    # Eager calls on plain tensors skip the dispatcher (python/csrc/eager_calls.cpp; see ops.py).
    if _EAGER_WRITE is None or torch.compiler.is_compiling() or \
            _EAGER_WRITE(rows, slot_mapping, cache, name, kv_layout) is NotImplemented:
        _WRITE(rows, slot_mapping, cache, name, kv_layout)
    return cache


_QUANTIZE = torch.ops.sparse_mla.quantize_kv_cache.default
_DEQUANTIZE = torch.ops.sparse_mla.dequantize_kv_cache.default
_WRITE = torch.ops.sparse_mla.write_kv_cache.default
try:
    from sparse_mla._sparse_mla_eager import write_kv_cache as _EAGER_WRITE
except ImportError:  # built without Python's headers: every call through torch.ops
    _EAGER_WRITE = None
