"""The documented Python API of sparse-mla: sparse prefill, decode planning and sparse decode.

Every function runs on the device of its tensors: CPU tensors on the CPU back end, CUDA tensors
on the CUDA back end, on torch's current CUDA stream (so calls can be captured in a CUDA graph).
Outputs are allocated unless passed in (``out=``, ``max_logits=``, ``lse=``); passed outputs are
written in place and returned. Errors in the arguments raise ``ValueError``; valid input that
the chosen back end cannot run, or a device failure, raises ``RuntimeError``. The messages name
the argument and its value.

The functions call the torch operators ``torch.ops.sparse_mla.{sparse_prefill, plan_decode,
sparse_decode}``; the fake implementations registered below let ``torch.compile`` trace them.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

import torch

from sparse_mla.kv_cache import KvCacheFormat, kv_cache_format

_D_V = 512


def _format_name(kv_format: "str | KvCacheFormat | None") -> Optional[str]:
    return None if kv_format is None else kv_cache_format(kv_format).name


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
    s_q, h_q = (q.shape[0], q.shape[1]) if q.dim() == 3 else (0, 0)
    if out is None:
        out = torch.empty((s_q, h_q, d_v), dtype=torch.bfloat16, device=q.device)
    if max_logits is None:
        max_logits = torch.empty((s_q, h_q), dtype=torch.float32, device=q.device)
    if lse is None:
        lse = torch.empty((s_q, h_q), dtype=torch.float32, device=q.device)
    torch.ops.sparse_mla.sparse_prefill(
        q, kv, indices, float(sm_scale), d_v, attn_sink, topk_length, out, max_logits, lse
    )
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


_PLANNED_ARGS = ("q", "kv_cache", "indices", "topk_length", "attn_sink", "extra_kv_cache",
                 "extra_indices", "extra_topk_length")


def _shapes(*tensors: Optional[torch.Tensor]) -> Dict[str, Optional[Tuple[int, ...]]]:
    """Shapes of the planned arguments, in _PLANNED_ARGS order."""
    return {name: None if t is None else tuple(t.shape) for name, t in zip(_PLANNED_ARGS, tensors)}


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
    d_v: int = _D_V,
) -> DecodePlan:
    """Plans :func:`sparse_decode` calls with these arguments' shapes and allocates the workspace.

    Reads shapes only (no tensor data, no device work); the arguments are those of
    :func:`sparse_decode`. Call it outside ``torch.compile`` regions and before capturing a CUDA
    graph, or let :func:`sparse_decode` plan for itself (``plan=None``).

    Returns:
        A :class:`DecodePlan` whose workspace lives on ``q.device``.
    """
    workspace_bytes, num_sm_parts, backend, kernel, reason = torch.ops.sparse_mla.plan_decode(
        q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
        extra_topk_length, _format_name(kv_format), d_v,
    )
    workspace = None
    if workspace_bytes > 0:
        # Zeroed, not empty: reusing a schedule that was never built must not read garbage (an
        # all-zero schedule is a set of empty pieces that write nothing outside the workspace).
        workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=q.device)
    shapes = _shapes(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                     extra_topk_length)
    return DecodePlan(workspace_bytes, num_sm_parts, backend, kernel, reason, workspace, shapes)


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
            float8_e4m3fn in format ``v32_fp8`` (656 B, d_qk 576), ``v4_fp8`` (584 B, d_qk 512)
            or ``bf16`` (see :mod:`sparse_mla.kv_cache`); block stride = ``kv_cache.stride(0)``.
        indices: ``[b, s_q, topk]`` int32 physical slots ``block * page_block_size + offset``;
            valid iff ``0 <= idx < num_blocks * page_block_size`` (and inside topk_length);
            anything else is never read.
        topk_length: optional ``[b]`` (per request) or ``[b, s_q]`` (per query token) int32.
        attn_sink: optional ``[h_q]`` fp32 (as in :func:`sparse_prefill`).
        extra_kv_cache: optional second cache of the same format, its own page size and blocks.
        extra_indices: ``[b, s_q, extra_topk]`` int32 slots of ``extra_kv_cache``; required iff
            it is given. The valid slots of both lists form one softmax.
        extra_topk_length: optional ``[b]`` or ``[b, s_q]`` int32.
        kv_format: format name; inferred from the cache's last dim when omitted.
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
    b, s_q, h_q = (q.shape[0], q.shape[1], q.shape[2]) if q.dim() == 4 else (0, 0, 0)
    if out is None:
        out = torch.empty((b, s_q, h_q, d_v), dtype=torch.bfloat16, device=q.device)
    if lse is None:
        lse = torch.empty((b, s_q, h_q), dtype=torch.float32, device=q.device)
    if reuse_schedule and plan is None:
        raise ValueError(
            "sparse_decode: reuse_schedule=True needs the plan whose schedule to reuse"
        )
    workspace = None
    if plan is not None:
        shapes = _shapes(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                         extra_indices, extra_topk_length)
        for name, shape in shapes.items():
            if shape != plan.shapes[name]:
                raise ValueError(
                    f"sparse_decode: the arguments do not match the plan: {name} has shape "
                    f"{shape}, the plan was made for {plan.shapes[name]}"
                )
        workspace = plan.workspace
    torch.ops.sparse_mla.sparse_decode(
        q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
        extra_topk_length, _format_name(kv_format),
        None if softmax_scale is None else float(softmax_scale), d_v, workspace,
        reuse_schedule, out, lse,
    )
    return out, lse


# ---- fake implementations: the ops only write their (already allocated) outputs ------------


@torch.library.register_fake("sparse_mla::sparse_prefill")
def _sparse_prefill_fake(
    q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int,
    attn_sink: Optional[torch.Tensor], topk_length: Optional[torch.Tensor], out: torch.Tensor,
    max_logits: torch.Tensor, lse: torch.Tensor,
) -> None:
    return None


@torch.library.register_fake("sparse_mla::sparse_decode")
def _sparse_decode_fake(
    q: torch.Tensor, kv_cache: torch.Tensor, indices: torch.Tensor,
    topk_length: Optional[torch.Tensor], attn_sink: Optional[torch.Tensor],
    extra_kv_cache: Optional[torch.Tensor], extra_indices: Optional[torch.Tensor],
    extra_topk_length: Optional[torch.Tensor], kv_format: Optional[str],
    softmax_scale: Optional[float], d_v: int, workspace: Optional[torch.Tensor],
    reuse_schedule: bool, out: torch.Tensor, lse: torch.Tensor,
) -> None:
    return None


@torch.library.register_fake("sparse_mla::quantize_kv_cache")
def _quantize_kv_cache_fake(kv: torch.Tensor, kv_format: str, cache: torch.Tensor) -> None:
    return None


@torch.library.register_fake("sparse_mla::dequantize_kv_cache")
def _dequantize_kv_cache_fake(
    cache: torch.Tensor, kv_format: Optional[str], out: torch.Tensor
) -> None:
    return None
