"""FlashMLA's Python API (``flash_mla``) on top of sparse-mla: switch with one line,

    import sparse_mla.flash_mla as flash_mla   # instead of: import flash_mla

Same functions, signatures, defaults, argument order, output shapes and layouts as FlashMLA's
``flash_mla_interface.py`` (main, 2026-04): :func:`get_mla_metadata` returns an empty
:class:`FlashMLASchedMeta` that the first :func:`flash_mla_with_kvcache` call fills (plan and
workspace) and later calls with the same configuration reuse; decode returns ``lse`` as the
``[b, h_q, s_q]`` transposed view of a contiguous ``[b, s_q, h_q]`` buffer.

Beyond FlashMLA: any h_q in 1..128 and any topk; every out-of-range index is invalid (not only
-1); ``topk_length`` also per query token (``[b, s_q]``) and for V3.2 caches; a bf16 cache with
``is_fp8_kvcache=False``; DeepSeek V4.1's ``v41_fp8`` / ``v41_fp4`` caches in either page layout
(keywords ``kv_layout`` / ``extra_kv_layout``); CPU tensors. Not supported
(``NotImplementedError``): dense decode (``indices=None``), ``causal=True``, and the dense MHA
prefill functions (``flash_attn_varlen_*``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import torch

from sparse_mla.kv_cache import infer_kv_cache_format
from sparse_mla.ops import _decode_alloc, _prefill_alloc, DecodePlan, plan_decode, sparse_decode


@dataclasses.dataclass
class FlashMLASchedMeta:
    """Decode scheduling state, filled by the first :func:`flash_mla_with_kvcache` call.

    Share one instance among the calls of one decode step with the same configuration (e.g.
    every layer); make a new one (``get_mla_metadata()``) when shapes or the values of
    ``topk_length`` / ``extra_topk_length`` change.

    Attributes:
        have_initialized: whether a call has filled the holder.
        config: the configuration of that call; later calls must match it.
        plan: the sparse-mla decode plan, with its workspace (holding the split schedule).
    """

    @dataclasses.dataclass
    class Config:
        """The shapes a holder is valid for (FlashMLA's fields)."""

        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int

        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]

        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

        # sparse-mla's page layouts of the caches (None: the format's own).
        kv_layout: Optional[str] = None
        extra_kv_layout: Optional[str] = None

    have_initialized: bool = False
    config: Optional[Config] = None
    plan: Optional[DecodePlan] = None
    # Every shape (and the cache dtype) of the call that filled the holder, with the format it
    # found: a later call whose key is equal skips the per-call configuration work.
    _key: Optional[tuple] = dataclasses.field(default=None, repr=False, compare=False)
    _kv_format: Optional[str] = dataclasses.field(default=None, repr=False, compare=False)


def get_mla_metadata(*args, **kwargs) -> Tuple[FlashMLASchedMeta, None]:
    """Returns ``(FlashMLASchedMeta(), None)``: an empty holder filled by the first decode call.

    Arguments are ignored (kept for compatibility with FlashMLA's older interface).
    """
    return FlashMLASchedMeta(), None


def _check_config(have: FlashMLASchedMeta.Config, want: FlashMLASchedMeta.Config) -> None:
    """Raises ValueError naming the first field in which a call differs from its holder."""
    for field in dataclasses.fields(want):
        expected, actual = getattr(have, field.name), getattr(want, field.name)
        if expected != actual:
            raise ValueError(
                f"flash_mla_with_kvcache: sched_meta.config.{field.name} = {expected}, but this "
                f"call has {actual}. Your input arguments are inconsistent with sched_meta; use "
                "one sched_meta per configuration (get_mla_metadata())."
            )


def flash_mla_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    cache_seqlens: Optional[torch.Tensor],
    head_dim_v: int,
    tile_scheduler_metadata: FlashMLASchedMeta,
    num_splits: None = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_k_cache: Optional[torch.Tensor] = None,
    extra_indices_in_kvcache: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    *,
    kv_layout: Optional[str] = None,
    extra_kv_layout: Optional[str] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode over a paged cache (FlashMLA's sparse path; SPEC §3).

    Args:
        q: ``[b, s_q, h_q, d_qk]`` bf16.
        k_cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` float8_e4m3fn / uint8 /
            int8: 656 B (V3.2, d_qk 576), 584 B (V4, d_qk 512), 528 B (V4.1 ``v41_fp8``) or
            288 B (V4.1 ``v41_fp4``) per token; block stride ``k_cache.stride(0)``. With
            ``is_fp8_kvcache=False``: a bf16 cache ``[num_blocks, page_block_size, 1, d_qk]``.
        block_table: ignored (the page is encoded in ``indices``).
        cache_seqlens: ignored.
        head_dim_v: 512.
        tile_scheduler_metadata: the holder from :func:`get_mla_metadata`.
        num_splits: must be None.
        softmax_scale: default ``d_qk ** -0.5``.
        causal: must be False.
        is_fp8_kvcache: True for the quantized formats (FP8, and V4.1's FP4).
        indices: ``[b, s_q, topk]`` int32 physical slots ``block * page_block_size + offset``;
            out-of-range values (e.g. -1) are invalid and never read.
        attn_sink: optional ``[h_q]`` fp32.
        extra_k_cache: optional second cache (own page size; the main cache's format, or with a
            V4.1 ``v41_fp8`` main cache a ``v41_fp8`` or ``v41_fp4`` one, told by its bytes).
        extra_indices_in_kvcache: ``[b, s_q, extra_topk]`` int32, required iff extra_k_cache.
        topk_length: optional ``[b]`` (or ``[b, s_q]``) int32.
        extra_topk_length: optional ``[b]`` (or ``[b, s_q]``) int32.
        kv_layout: sparse-mla only, keyword: the page layout of ``k_cache``, ``"page_split"``
            or ``"token_interleaved"`` (default: the format's own, page_split for V4 / V4.1).
        extra_kv_layout: sparse-mla only, keyword: the page layout of ``extra_k_cache``
            (default: ``kv_layout`` where its format has it, else the format's own).

    Returns:
        ``(out, lse)``: out ``[b, s_q, h_q, head_dim_v]`` bf16 contiguous; lse
        ``[b, h_q, s_q]`` fp32, the ``transpose(1, 2)`` view of a contiguous ``[b, s_q, h_q]``.
    """
    sched_meta = tile_scheduler_metadata
    if not isinstance(sched_meta, FlashMLASchedMeta):
        raise TypeError(
            "tile_scheduler_metadata must be of type FlashMLASchedMeta (from get_mla_metadata()), "
            f"got {type(sched_meta).__name__}"
        )
    if num_splits is not None:
        raise ValueError("num_splits must be None")
    if indices is None:
        raise NotImplementedError(
            "flash_mla_with_kvcache: dense decode (indices=None) is not supported by sparse-mla; "
            "pass indices for sparse decode"
        )
    if causal:
        raise NotImplementedError(
            "flash_mla_with_kvcache: causal=True is not supported (sparse decode has no causal "
            "mask)"
        )
    # Every planned shape, the cache dtype and the flags: equal to the holder's key, the call is
    # the configuration the holder was filled for, its plan fits (the plan's own shape check
    # would pass) and the format is the one found then.
    key = (q.shape, k_cache.shape, k_cache.dtype, indices.shape, is_fp8_kvcache, head_dim_v,
           None if topk_length is None else topk_length.shape,
           None if attn_sink is None else attn_sink.shape,
           None if extra_k_cache is None else (extra_k_cache.shape, extra_k_cache.dtype),
           None if extra_indices_in_kvcache is None else extra_indices_in_kvcache.shape,
           None if extra_topk_length is None else extra_topk_length.shape,
           kv_layout, extra_kv_layout)
    if sched_meta.have_initialized and key == sched_meta._key:
        out, lse = _decode_alloc(
            q, k_cache, indices, topk_length, attn_sink, extra_k_cache, extra_indices_in_kvcache,
            extra_topk_length, sched_meta._kv_format,
            None if softmax_scale is None else float(softmax_scale), head_dim_v,
            sched_meta.plan.workspace, True, kv_layout, None, extra_kv_layout,
        )
        return out, lse.transpose(1, 2)

    kv_format = infer_kv_cache_format(k_cache)
    if is_fp8_kvcache == (kv_format == "bf16"):
        raise ValueError(
            f"flash_mla_with_kvcache: is_fp8_kvcache = {is_fp8_kvcache} but k_cache "
            f"({k_cache.dtype}, shape {list(k_cache.shape)}) is a {kv_format} cache"
        )

    config = FlashMLASchedMeta.Config(
        q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], k_cache.shape[2],
        causal, is_fp8_kvcache, indices.shape[-1],
        extra_k_cache.shape[1] if extra_k_cache is not None else None,
        extra_indices_in_kvcache.shape[-1] if extra_indices_in_kvcache is not None else None,
        kv_layout, extra_kv_layout,
    )
    decode_args = dict(
        topk_length=topk_length,
        attn_sink=attn_sink,
        extra_kv_cache=extra_k_cache,
        extra_indices=extra_indices_in_kvcache,
        extra_topk_length=extra_topk_length,
        kv_format=kv_format,
        kv_layout=kv_layout,
        extra_kv_layout=extra_kv_layout,
        d_v=head_dim_v,
    )
    reuse = sched_meta.have_initialized
    if reuse:
        assert sched_meta.config is not None
        _check_config(sched_meta.config, config)
        plan = sched_meta.plan
    else:
        plan = plan_decode(q, k_cache, indices, **decode_args)

    out, lse = sparse_decode(
        q, k_cache, indices, softmax_scale=softmax_scale, plan=plan,
        reuse_schedule=reuse, **decode_args,
    )
    # Only a call that ran (and so built the schedule in the plan's workspace) may fill the
    # holder: a later call reuses that schedule without rebuilding it.
    if not reuse:
        sched_meta.plan, sched_meta.config, sched_meta.have_initialized = plan, config, True
        sched_meta._key, sched_meta._kv_format = key, kv_format
    return out, lse.transpose(1, 2)


def flash_mla_sparse_fwd(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    d_v: int = 512,
    attn_sink: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse attention prefill (FlashMLA's ``flash_mla_sparse_fwd``; SPEC §2).

    Args:
        q: ``[s_q, h_q, d_qk]`` bf16.
        kv: ``[s_kv, h_kv = 1, d_qk]`` bf16.
        indices: ``[s_q, h_kv = 1, topk]`` int32; values outside ``[0, s_kv)`` are invalid.
        sm_scale: scale of ``q . k``.
        d_v: 512.
        attn_sink: optional ``[h_q]`` fp32.
        topk_length: optional ``[s_q]`` int32.

    Returns:
        ``(out [s_q, h_q, d_v] bf16, max_logits [s_q, h_q] fp32, lse [s_q, h_q] fp32)``.
    """
    return _prefill_alloc(q, kv, indices, float(sm_scale), d_v, attn_sink, topk_length)


def _dense_not_supported(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"{name}: dense MHA prefill is not part of sparse-mla (sparse MLA kernels only)"
    )


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_qo: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    max_seqlen_qo: int,
    max_seqlen_kv: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    is_varlen: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's dense MHA prefill: not supported (raises NotImplementedError)."""
    raise _dense_not_supported("flash_attn_varlen_func")


def flash_attn_varlen_qkvpacked_func(
    qkv: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    head_dim_qk: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    is_varlen: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's dense MHA prefill: not supported (raises NotImplementedError)."""
    raise _dense_not_supported("flash_attn_varlen_qkvpacked_func")


def flash_attn_varlen_kvpacked_func(
    q: torch.Tensor,
    kv: torch.Tensor,
    cu_seqlens_qo: torch.Tensor,
    cu_seqlens_kv: torch.Tensor,
    max_seqlen_qo: int,
    max_seqlen_kv: int,
    head_dim_qk: int,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    deterministic: bool = False,
    is_varlen: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's dense MHA prefill: not supported (raises NotImplementedError)."""
    raise _dense_not_supported("flash_attn_varlen_kvpacked_func")


__all__ = [
    "FlashMLASchedMeta",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_mla_sparse_fwd",
    "flash_mla_with_kvcache",
    "get_mla_metadata",
]
