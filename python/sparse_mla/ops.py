"""The documented Python API of sparse-mla: sparse prefill, decode planning and sparse decode.

Every function runs on the device of its tensors: CPU tensors on the CPU back end, CUDA tensors
on the CUDA back end, on torch's current CUDA stream (so calls can be captured in a CUDA graph).
Outputs are allocated unless passed in (``out=``, ``max_logits=``, ``lse=``), after every argument
has been validated; passed outputs are written in place and returned, and must not overlap
themselves or alias an input. Errors in the arguments raise ``ValueError``; valid input that
the chosen back end cannot run, or a device failure, raises ``RuntimeError``; an argument that
requires grad raises ``NotImplementedError`` (no backward). The messages name the argument and
its value (docs/python.md, "What the package rejects and why").

The functions call the torch operators ``torch.ops.sparse_mla.{sparse_prefill,
sparse_prefill_alloc, plan_decode, sparse_decode, sparse_decode_alloc}`` (``*_alloc``: the
operator allocates the outputs); the fake implementations registered below let
``torch.compile`` trace them. The operators are looked up once, at import: every call's
attribute chain through ``torch.ops`` is host time.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import torch

from sparse_mla.kv_cache import KvCacheFormat, kv_cache_format

_D_V = 512


def sparse_prefill(
    q: torch.Tensor,
    kv: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    d_v: int = _D_V,
    attn_sink: Optional[torch.Tensor] = None,
    topk_length: Optional[torch.Tensor] = None,
    *,
    out: Optional[torch.Tensor] = None,
    max_logits: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse MLA prefill (SPEC §2): each query token attends to its own top-k KV rows.

    Args:
        q: ``[s_q, h_q, d_qk]`` bf16, last dim contiguous; d_qk 576 (V3.2) or 512 (V4),
            h_q 1..128.
        kv: ``[s_kv, 1, d_qk]`` bf16, last dim contiguous. V is ``kv[..., :d_v]``.
        indices: ``[s_q, 1, topk]`` int32. Slot k of query i is valid iff
            ``0 <= indices[i, 0, k] < s_kv`` and ``k < topk_length[i]``; invalid slots (any
            other value) are never read.
        sm_scale: scale of ``q . k`` (no default).
        d_v: value dimension; must be 512.
        attn_sink: optional ``[h_q]`` fp32; output scaled by ``1 / (1 + exp(sink - lse))``
            (-inf: no effect, +inf: output 0); lse and max_logits unchanged.
        topk_length: optional ``[s_q]`` int32.
        out: optional ``[s_q, h_q, d_v]`` bf16 output buffer (last dim contiguous).
        max_logits: optional ``[s_q, h_q]`` fp32 output buffer.
        lse: optional ``[s_q, h_q]`` fp32 output buffer.

    Returns:
        ``(out, max_logits, lse)``: ``[s_q, h_q, d_v]`` bf16, ``[s_q, h_q]`` fp32 (max scaled
        logit), ``[s_q, h_q]`` fp32 (natural-log log-sum-exp). A query with no valid slot gets
        out 0, max_logits -inf and lse +inf.
    """
    if out is None and max_logits is None and lse is None:
        # Validated in full before the outputs are allocated.
        return _prefill_alloc(q, kv, indices, float(sm_scale), d_v, attn_sink, topk_length)
    s_q, h_q = (q.shape[0], q.shape[1]) if q.dim() == 3 else (0, 0)
    if out is None:
        # An unsupported d_v gets an empty placeholder: validation reports d_v before any size.
        out = torch.empty((s_q, h_q, d_v if d_v == _D_V else 0), dtype=torch.bfloat16,
                          device=q.device)
    if max_logits is None:
        max_logits = torch.empty((s_q, h_q), dtype=torch.float32, device=q.device)
    if lse is None:
        lse = torch.empty((s_q, h_q), dtype=torch.float32, device=q.device)
    _prefill_into(q, kv, indices, float(sm_scale), d_v, attn_sink, topk_length, out, max_logits,
                  lse)
    return out, max_logits, lse


@dataclasses.dataclass
class DecodePlan:
    """How a decode call of given shapes runs, and the workspace it needs.

    Made by :func:`plan_decode` once per decode step and passed to every :func:`sparse_decode`
    of that step (every layer): the first call builds the split schedule into ``workspace`` on
    the device from the topk lengths, later calls with ``reuse_schedule=True`` reuse it. A plan
    fits only arguments of the shapes it was made for (``sparse_decode`` checks).

    Attributes:
        workspace_bytes: bytes of workspace the kernel needs (0 for the CPU back end).
        num_sm_parts: work units the KV work is split into.
        backend: ``"cpu"`` or ``"cuda"``.
        kernel: the kernel variant that runs.
        reason: why this kernel and split count.
        workspace: ``[workspace_bytes]`` uint8 on the tensors' device, or None when 0 bytes.
        shapes: the argument shapes the plan was made for (name -> shape, None if absent).
    """

    workspace_bytes: int
    num_sm_parts: int
    backend: str
    kernel: str
    reason: str
    workspace: Optional[torch.Tensor]
    shapes: Dict[str, Optional[Tuple[int, ...]]]
    # The same shapes as one tuple (see _shape_key), what sparse_decode compares on every call.
    _shape_key: tuple = dataclasses.field(default=(), repr=False, compare=False)


_PLANNED_ARGS = ("q", "kv_cache", "indices", "topk_length", "attn_sink", "extra_kv_cache",
                 "extra_indices", "extra_topk_length")


def _shape_key(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
               extra_topk_length) -> tuple:
    """The planned arguments' shapes as one tuple (None for an absent one): compared on every
    call with a plan, so plain attribute reads, no dict."""
    return (q.shape, kv_cache.shape, indices.shape,
            None if topk_length is None else topk_length.shape,
            None if attn_sink is None else attn_sink.shape,
            None if extra_kv_cache is None else extra_kv_cache.shape,
            None if extra_indices is None else extra_indices.shape,
            None if extra_topk_length is None else extra_topk_length.shape)


def _plan_mismatch(plan: "DecodePlan", key: tuple) -> Optional[ValueError]:
    """The error for arguments whose shapes are not the plan's, naming the first that differs
    (None when ``plan.shapes`` matches: a plan built by hand has no shape key)."""
    for name, shape in zip(_PLANNED_ARGS, key):
        shape = None if shape is None else tuple(shape)
        if shape != plan.shapes[name]:
            return ValueError(
                f"sparse_decode: the arguments do not match the plan: {name} has shape "
                f"{shape}, the plan was made for {plan.shapes[name]}"
            )
    return None


def _format_name(kv_format: "str | KvCacheFormat | None") -> Optional[str]:
    # A string goes to the operator as it is (it names an unknown format in its error).
    if kv_format is None or isinstance(kv_format, str):
        return kv_format
    return kv_cache_format(kv_format).name


_NO_LAYOUTS: Dict[str, str] = {}


def _layout_args(kv_layout: Optional[str], extra_kv_format: "str | KvCacheFormat | None",
                 extra_kv_layout: Optional[str]) -> Dict[str, str]:
    """The operators' keyword-only cache arguments that are set (none: the common V3.2 / V4
    call passes no keywords). Strings go as they are: the operator names a bad value."""
    if kv_layout is None and extra_kv_format is None and extra_kv_layout is None:
        return _NO_LAYOUTS
    return {k: v for k, v in (("kv_layout", kv_layout),
                              ("extra_kv_format", _format_name(extra_kv_format)),
                              ("extra_kv_layout", extra_kv_layout)) if v is not None}


def plan_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    *,
    topk_length: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    kv_format: "str | KvCacheFormat | None" = None,
    kv_layout: Optional[str] = None,
    extra_kv_format: "str | KvCacheFormat | None" = None,
    extra_kv_layout: Optional[str] = None,
    d_v: int = _D_V,
) -> DecodePlan:
    """Plans :func:`sparse_decode` calls with these arguments' shapes and allocates the workspace.

    Reads shapes only (no tensor data, no device work); the arguments are those of
    :func:`sparse_decode`. Call it outside ``torch.compile`` regions and before capturing a CUDA
    graph, or let :func:`sparse_decode` plan for itself (``plan=None``).

    Returns:
        A :class:`DecodePlan` whose workspace lives on ``q.device``.
    """
    workspace_bytes, num_sm_parts, backend, kernel, reason = _PLAN(
        q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
        extra_topk_length, _format_name(kv_format), d_v,
        **_layout_args(kv_layout, extra_kv_format, extra_kv_layout),
    )
    workspace = None
    if workspace_bytes > 0:
        # Zeroed, not empty: reusing a schedule that was never built must not read garbage (an
        # all-zero schedule is a set of empty pieces that write nothing outside the workspace).
        workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=q.device)
    key = _shape_key(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                     extra_topk_length)
    shapes = {name: None if shape is None else tuple(shape)
              for name, shape in zip(_PLANNED_ARGS, key)}
    return DecodePlan(workspace_bytes, num_sm_parts, backend, kernel, reason, workspace, shapes,
                      key)


def sparse_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    *,
    topk_length: Optional[torch.Tensor] = None,
    attn_sink: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_length: Optional[torch.Tensor] = None,
    kv_format: "str | KvCacheFormat | None" = None,
    kv_layout: Optional[str] = None,
    extra_kv_format: "str | KvCacheFormat | None" = None,
    extra_kv_layout: Optional[str] = None,
    softmax_scale: Optional[float] = None,
    d_v: int = _D_V,
    plan: Optional[DecodePlan] = None,
    reuse_schedule: bool = False,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode over a paged KV cache (SPEC §3).

    Args:
        q: ``[b, s_q, h_q, d_qk]`` bf16, last dim contiguous (s_q: query tokens per request).
        kv_cache: ``[num_blocks, page_block_size, 1, bytes_per_token]`` uint8 / int8 /
            float8_e4m3fn in format ``v32_fp8`` (656 B, d_qk 576), ``v4_fp8`` (584 B, d_qk 512),
            ``v41_fp8`` (528 B, d_qk 512), ``v41_fp4`` (288 B, d_qk 512) or ``bf16`` (see
            :mod:`sparse_mla.kv_cache`); block stride = ``kv_cache.stride(0)``.
        indices: ``[b, s_q, topk]`` int32 physical slots ``block * page_block_size + offset``;
            valid iff ``0 <= idx < num_blocks * page_block_size`` (and inside topk_length);
            anything else is never read.
        topk_length: optional ``[b]`` (per request) or ``[b, s_q]`` (per query token) int32.
        attn_sink: optional ``[h_q]`` fp32 (as in :func:`sparse_prefill`).
        extra_kv_cache: optional second cache with its own page size and blocks: of the main
            cache's format, or with a ``v41_fp8`` main cache ``v41_fp8`` or ``v41_fp4``.
        extra_indices: ``[b, s_q, extra_topk]`` int32 slots of ``extra_kv_cache``; required iff
            it is given. The valid slots of both lists form one softmax.
        extra_topk_length: optional ``[b]`` or ``[b, s_q]`` int32.
        kv_format: format name; inferred from the cache's last dim when omitted.
        kv_layout: the main cache's page layout, ``"page_split"`` or ``"token_interleaved"``
            (default: its format's own; bytes per token cannot tell them apart).
        extra_kv_format: the extra cache's format; inferred from its last dim when omitted.
        extra_kv_layout: the extra cache's page layout (default: ``kv_layout`` where the extra
            cache's format has it, else its format's own).
        softmax_scale: scale of ``q . k``; default ``d_qk ** -0.5``.
        d_v: value dimension; must be 512 (V = first 512 dims of the dequantized row).
        plan: from :func:`plan_decode` for these shapes; when omitted the call plans for itself
            and allocates its own workspace.
        reuse_schedule: the plan's workspace already holds the schedule of an earlier call of
            this step (same shapes and topk lengths); skips rebuilding it.
        out: optional ``[b, s_q, h_q, d_v]`` bf16 output buffer.
        lse: optional ``[b, s_q, h_q]`` fp32 output buffer.

    Returns:
        ``(out, lse)``: ``[b, s_q, h_q, d_v]`` bf16 and ``[b, s_q, h_q]`` fp32 (natural log;
        +inf, with out 0, for a query with no valid slot).
    """
    workspace = None
    if plan is not None:
        key = _shape_key(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                         extra_indices, extra_topk_length)
        if key != plan._shape_key:
            mismatch = _plan_mismatch(plan, key)
            if mismatch is not None:
                raise mismatch
        workspace = plan.workspace
    elif reuse_schedule:
        raise ValueError(
            "sparse_decode: reuse_schedule=True needs the plan whose schedule to reuse"
        )
    name = _format_name(kv_format)
    scale = None if softmax_scale is None else float(softmax_scale)
    if out is None and lse is None:
        # Validated in full before the outputs are allocated.
        return _decode_alloc(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                             extra_indices, extra_topk_length, name, scale, d_v, workspace,
                             reuse_schedule, kv_layout, _format_name(extra_kv_format),
                             extra_kv_layout)
    b, s_q, h_q = (q.shape[0], q.shape[1], q.shape[2]) if q.dim() == 4 else (0, 0, 0)
    if out is None:
        # An unsupported d_v gets an empty placeholder: validation reports d_v before any size.
        out = torch.empty((b, s_q, h_q, d_v if d_v == _D_V else 0), dtype=torch.bfloat16,
                          device=q.device)
    if lse is None:
        lse = torch.empty((b, s_q, h_q), dtype=torch.float32, device=q.device)
    _decode_into(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                 extra_topk_length, name, scale, d_v, workspace, reuse_schedule, out, lse,
                 kv_layout, _format_name(extra_kv_format), extra_kv_layout)
    return out, lse


_PREFILL = torch.ops.sparse_mla.sparse_prefill.default
_PREFILL_ALLOC = torch.ops.sparse_mla.sparse_prefill_alloc.default
_PLAN = torch.ops.sparse_mla.plan_decode.default
_DECODE = torch.ops.sparse_mla.sparse_decode.default
_DECODE_ALLOC = torch.ops.sparse_mla.sparse_decode_alloc.default

# The operators without the dispatcher (python/csrc/eager_calls.cpp): eager calls on plain CPU /
# CUDA tensors skip torch's boxed path; they return NotImplemented where the operator is needed
# (tensor subclasses, grad, meta tensors, torch-function / dispatch modes), and torch.compile
# traces the operators. Absent when the package was built without Python's headers.
try:
    from sparse_mla import _sparse_mla_eager
except ImportError:
    _sparse_mla_eager = None
_EAGER_PREFILL_ALLOC = getattr(_sparse_mla_eager, "sparse_prefill_alloc", None)
_EAGER_PREFILL = getattr(_sparse_mla_eager, "sparse_prefill", None)
_EAGER_DECODE_ALLOC = getattr(_sparse_mla_eager, "sparse_decode_alloc", None)
_EAGER_DECODE = getattr(_sparse_mla_eager, "sparse_decode", None)
_is_compiling = torch.compiler.is_compiling


def _prefill_alloc(q, kv, indices, sm_scale: float, d_v: int, attn_sink, topk_length):
    """``sparse_mla::sparse_prefill_alloc``: (out, max_logits, lse)."""
    if _EAGER_PREFILL_ALLOC is not None and not _is_compiling():
        result = _EAGER_PREFILL_ALLOC(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)
        if result is not NotImplemented:
            return result
    return _PREFILL_ALLOC(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)


def _prefill_into(q, kv, indices, sm_scale: float, d_v: int, attn_sink, topk_length, out,
                  max_logits, lse) -> None:
    """``sparse_mla::sparse_prefill``: writes out, max_logits and lse."""
    if _EAGER_PREFILL is not None and not _is_compiling():
        if _EAGER_PREFILL(q, kv, indices, sm_scale, d_v, attn_sink, topk_length, out,
                          max_logits, lse) is not NotImplemented:
            return
    _PREFILL(q, kv, indices, sm_scale, d_v, attn_sink, topk_length, out, max_logits, lse)


def _decode_into(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                 extra_topk_length, kv_format: Optional[str], softmax_scale: Optional[float],
                 d_v: int, workspace, reuse_schedule: bool, out, lse, kv_layout: Optional[str],
                 extra_kv_format: Optional[str], extra_kv_layout: Optional[str]) -> None:
    """``sparse_mla::sparse_decode``: writes out and lse. Names are strings or None."""
    if _EAGER_DECODE is not None and not _is_compiling():
        if _EAGER_DECODE(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                         extra_indices, extra_topk_length, kv_format, softmax_scale, d_v,
                         workspace, reuse_schedule, out, lse, kv_layout, extra_kv_format,
                         extra_kv_layout) is not NotImplemented:
            return
    _DECODE(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
            extra_topk_length, kv_format, softmax_scale, d_v, workspace, reuse_schedule, out, lse,
            **_layout_args(kv_layout, extra_kv_format, extra_kv_layout))


def _decode_alloc(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                  extra_topk_length, kv_format: Optional[str], softmax_scale: Optional[float],
                  d_v: int, workspace, reuse_schedule: bool, kv_layout: Optional[str],
                  extra_kv_format: Optional[str], extra_kv_layout: Optional[str]):
    """``sparse_mla::sparse_decode_alloc``: (out, lse). Names are strings or None."""
    if _EAGER_DECODE_ALLOC is not None and not _is_compiling():
        result = _EAGER_DECODE_ALLOC(q, kv_cache, indices, topk_length, attn_sink,
                                     extra_kv_cache, extra_indices, extra_topk_length, kv_format,
                                     softmax_scale, d_v, workspace, reuse_schedule, kv_layout,
                                     extra_kv_format, extra_kv_layout)
        if result is not NotImplemented:
            return result
    return _DECODE_ALLOC(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                         extra_indices, extra_topk_length, kv_format, softmax_scale, d_v,
                         workspace, reuse_schedule,
                         **_layout_args(kv_layout, extra_kv_format, extra_kv_layout))


# ---- fake implementations ---------------------------------------------------------------------
# They run for meta tensors and under FakeTensorMode (torch.compile tracing). A meta tensor mixed
# with real ones would otherwise send the call here and return untouched outputs, so every
# tensor must be on q's device.


def _check_devices(op: str, q: torch.Tensor, **tensors: Optional[torch.Tensor]) -> None:
    for name, t in tensors.items():
        if t is not None and t.device != q.device:
            raise ValueError(
                f"{op}: {name} is on {t.device} but q is on {q.device}; every tensor of a call "
                "must be on one device (meta tensors only with meta tensors)"
            )


def _prefill_shapes(q: torch.Tensor, d_v: int) -> Tuple[int, int, int]:
    s_q, h_q = (q.shape[0], q.shape[1]) if q.dim() == 3 else (0, 0)
    if d_v != _D_V:
        raise ValueError(f"sparse_prefill: d_v = {d_v} is not supported; d_v must be 512")
    return s_q, h_q, d_v


@torch.library.register_fake("sparse_mla::sparse_prefill")
def _sparse_prefill_fake(
    q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
    attn_sink: Optional[torch.Tensor], topk_length: Optional[torch.Tensor], out: torch.Tensor,
    max_logits: torch.Tensor, lse: torch.Tensor,
) -> None:
    _check_devices("sparse_prefill", q, kv=kv, indices=indices, attn_sink=attn_sink,
                   topk_length=topk_length, out=out, max_logits=max_logits, lse=lse)
    return None


@torch.library.register_fake("sparse_mla::sparse_prefill_alloc")
def _sparse_prefill_alloc_fake(
    q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
    attn_sink: Optional[torch.Tensor], topk_length: Optional[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_devices("sparse_prefill", q, kv=kv, indices=indices, attn_sink=attn_sink,
                   topk_length=topk_length)
    s_q, h_q, d_v = _prefill_shapes(q, d_v)
    return (q.new_empty((s_q, h_q, d_v), dtype=torch.bfloat16),
            q.new_empty((s_q, h_q), dtype=torch.float32),
            q.new_empty((s_q, h_q), dtype=torch.float32))


def _decode_devices(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                    extra_topk_length, **outputs) -> None:
    _check_devices("sparse_decode", q, kv_cache=kv_cache, indices=indices,
                   topk_length=topk_length, attn_sink=attn_sink, extra_kv_cache=extra_kv_cache,
                   extra_indices=extra_indices, extra_topk_length=extra_topk_length, **outputs)


@torch.library.register_fake("sparse_mla::sparse_decode")
def _sparse_decode_fake(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor,
    topk_length: Optional[torch.Tensor], attn_sink: Optional[torch.Tensor],
    extra_kv_cache: Optional[torch.Tensor], extra_indices: Optional[torch.Tensor],
    extra_topk_length: Optional[torch.Tensor], kv_format: Optional[str],
    softmax_scale: Optional[float], d_v: int, workspace: Optional[torch.Tensor],
    reuse_schedule: bool, out: torch.Tensor, lse: torch.Tensor, *,
    kv_layout: Optional[str] = None, extra_kv_format: Optional[str] = None,
    extra_kv_layout: Optional[str] = None,
) -> None:
    _decode_devices(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                    extra_topk_length, workspace=workspace, out=out, lse=lse)
    return None


@torch.library.register_fake("sparse_mla::sparse_decode_alloc")
def _sparse_decode_alloc_fake(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor,
    topk_length: Optional[torch.Tensor], attn_sink: Optional[torch.Tensor],
    extra_kv_cache: Optional[torch.Tensor], extra_indices: Optional[torch.Tensor],
    extra_topk_length: Optional[torch.Tensor], kv_format: Optional[str],
    softmax_scale: Optional[float], d_v: int, workspace: Optional[torch.Tensor],
    reuse_schedule: bool, *, kv_layout: Optional[str] = None,
    extra_kv_format: Optional[str] = None, extra_kv_layout: Optional[str] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    _decode_devices(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                    extra_topk_length, workspace=workspace)
    if d_v != _D_V:
        raise ValueError(f"sparse_decode: d_v = {d_v} is not supported; d_v must be 512")
    b, s_q, h_q = (q.shape[0], q.shape[1], q.shape[2]) if q.dim() == 4 else (0, 0, 0)
    return (q.new_empty((b, s_q, h_q, d_v), dtype=torch.bfloat16),
            q.new_empty((b, s_q, h_q), dtype=torch.float32))


def _stand_in(t: Optional[torch.Tensor], cache: bool = False) -> Optional[torch.Tensor]:
    """A real tensor with ``t``'s dtype, device, shape and strides (one block of a cache: a
    plan does not depend on the block count), for planning from a fake tensor's metadata."""
    if t is None:
        return None
    # A plan is specific to its shapes: symbolic sizes are specialised (int() guards on them).
    shape = [int(n) for n in t.shape]
    if cache and shape:
        shape[0] = min(shape[0], 1)
    stride = [int(st) for st in t.stride()]
    span = 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n > 0)
    if cache and shape and shape[0] == 1:
        # The block stride of a single block is not read; keep the block's bytes.
        span = max(span, stride[0]) if stride else span
    storage = torch.empty(span, dtype=t.dtype, device=t.device)
    return storage.as_strided(shape, stride)


@torch.library.register_fake("sparse_mla::plan_decode")
def _plan_decode_fake(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor,
    topk_length: Optional[torch.Tensor], attn_sink: Optional[torch.Tensor],
    extra_kv_cache: Optional[torch.Tensor], extra_indices: Optional[torch.Tensor],
    extra_topk_length: Optional[torch.Tensor], kv_format: Optional[str], d_v: int, *,
    kv_layout: Optional[str] = None, extra_kv_format: Optional[str] = None,
    extra_kv_layout: Optional[str] = None,
) -> Tuple[int, int, str, str, str]:
    """The real plan: planning reads shapes, strides and the device only, so it runs on real
    stand-ins of the (fake) arguments. Meta tensors have no back end to plan for."""
    _decode_devices(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                    extra_topk_length)
    if q.device.type == "meta":
        raise ValueError(
            "plan_decode: q is on meta; a plan is made for the device that will run the call "
            "(cpu or cuda)"
        )
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _PLAN(_stand_in(q), _stand_in(kv_cache, cache=True), _stand_in(indices),
                     _stand_in(topk_length), _stand_in(attn_sink),
                     _stand_in(extra_kv_cache, cache=True), _stand_in(extra_indices),
                     _stand_in(extra_topk_length), kv_format, d_v,
                     **_layout_args(kv_layout, extra_kv_format, extra_kv_layout))


@torch.library.register_fake("sparse_mla::quantize_kv_cache")
def _quantize_kv_cache_fake(kv: torch.Tensor, kv_format: str, cache: torch.Tensor, *,
                            kv_layout: Optional[str] = None) -> None:
    if cache.device != kv.device:
        raise ValueError(f"quantize_kv_cache: cache is on {cache.device} but kv is on {kv.device}")
    return None


@torch.library.register_fake("sparse_mla::dequantize_kv_cache")
def _dequantize_kv_cache_fake(
    cache: torch.Tensor, kv_format: Optional[str], out: torch.Tensor, *,
    kv_layout: Optional[str] = None,
) -> None:
    if out.device != cache.device:
        raise ValueError(
            f"dequantize_kv_cache: out is on {out.device} but cache is on {cache.device}"
        )
    return None


@torch.library.register_fake("sparse_mla::write_kv_cache")
def _write_kv_cache_fake(
    rows: torch.Tensor, slot_mapping: torch.Tensor, cache: torch.Tensor,
    kv_format: Optional[str] = None, kv_layout: Optional[str] = None,
) -> None:
    for name, t in (("rows", rows), ("slot_mapping", slot_mapping)):
        if t.device != cache.device:
            raise ValueError(
                f"write_kv_cache: {name} is on {t.device} but cache is on {cache.device}"
            )
    return None
