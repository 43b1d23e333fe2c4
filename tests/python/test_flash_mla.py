"""sparse_mla.flash_mla: FlashMLA's signatures, defaults, output layouts, the lazily filled
scheduling holder, argument errors and the unsupported features."""

import inspect

import pytest
import torch

import sparse_mla
import sparse_mla.flash_mla as flash_mla
from sparse_mla.reference import sparse_decode_reference, sparse_prefill_reference
from support import (DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STATS, assert_close,
                     decode_case, golden_scalar, golden_tensor, prefill_case)


def test_signatures_are_flashmla():
    """Parameter names, order and defaults of FlashMLA's flash_mla_interface.py."""
    def params(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    empty = inspect.Parameter.empty
    assert params(flash_mla.flash_mla_with_kvcache) == [
        ("q", empty), ("k_cache", empty), ("block_table", empty), ("cache_seqlens", empty),
        ("head_dim_v", empty), ("tile_scheduler_metadata", empty), ("num_splits", None),
        ("softmax_scale", None), ("causal", False), ("is_fp8_kvcache", False),
        ("indices", None), ("attn_sink", None), ("extra_k_cache", None),
        ("extra_indices_in_kvcache", None), ("topk_length", None), ("extra_topk_length", None),
        # sparse-mla's own, keyword-only (V4.1 page layouts): FlashMLA calls are unaffected.
        ("kv_layout", None), ("extra_kv_layout", None),
    ]
    keyword_only = [p.name for p in inspect.signature(
        flash_mla.flash_mla_with_kvcache).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword_only == ["kv_layout", "extra_kv_layout"]
    assert params(flash_mla.flash_mla_sparse_fwd) == [
        ("q", empty), ("kv", empty), ("indices", empty), ("sm_scale", empty), ("d_v", 512),
        ("attn_sink", None), ("topk_length", None),
    ]
    meta, second = flash_mla.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 64, 1, 128,
                                              True, 2048)
    assert isinstance(meta, flash_mla.FlashMLASchedMeta) and second is None
    assert not meta.have_initialized and meta.config is None


def test_sparse_fwd_matches_reference():
    args = prefill_case(s_q=5, s_kv=80, h_q=64, d_qk=576, topk=64, seed=21)
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(
        args["q"], args["kv"], args["indices"], args["sm_scale"], 512, args["attn_sink"],
        args["topk_length"])
    ref_out, ref_max, ref_lse = sparse_prefill_reference(**args)
    assert out.is_contiguous() and out.shape == (5, 64, 512)
    assert_close("out", out, ref_out, PREFILL_OUT)
    assert_close("max_logits", max_logits, ref_max, PREFILL_STATS)
    assert_close("lse", lse, ref_lse, PREFILL_STATS)


def call_decode(args, meta, **overrides):
    kwargs = dict(softmax_scale=args["softmax_scale"], is_fp8_kvcache=True,
                  indices=args["indices"], attn_sink=args["attn_sink"],
                  extra_k_cache=args.get("extra_kv_cache"),
                  extra_indices_in_kvcache=args.get("extra_indices"),
                  topk_length=args["topk_length"],
                  extra_topk_length=args.get("extra_topk_length"))
    kwargs.update(overrides)
    return flash_mla.flash_mla_with_kvcache(args["q"], args["kv_cache"], None, None, 512, meta,
                                            **kwargs)


@pytest.mark.parametrize("fmt,extra", [("v32_fp8", False), ("v4_fp8", True)])
def test_with_kvcache_layout_and_values(fmt, extra):
    args = decode_case(fmt=fmt, b=3, s_q=2, h_q=64, page_block_size=64, extra=extra, seed=22)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = call_decode(args, meta)
    assert out.shape == (3, 2, 64, 512) and out.is_contiguous()
    # lse is the [b, h_q, s_q] transposed view of a contiguous [b, s_q, h_q] buffer.
    assert lse.shape == (3, 64, 2) and lse.transpose(1, 2).is_contiguous()
    assert meta.have_initialized and meta.plan is not None
    assert meta.config.topk == 64 and meta.config.b == 3
    ref_out, ref_lse = sparse_decode_reference(**args)
    assert_close("out", out, ref_out, DECODE_OUT)
    assert_close("lse", lse.transpose(1, 2), ref_lse, DECODE_LSE)
    # Later layers of the step reuse the holder (and its schedule).
    plan = meta.plan
    out2, lse2 = call_decode(args, meta)
    assert meta.plan is plan
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


def test_default_softmax_scale_is_d_qk_power():
    args = decode_case(fmt="v32_fp8", page_block_size=16, seed=23)
    _, lse = call_decode(args, flash_mla.get_mla_metadata()[0], softmax_scale=None)
    _, ref_lse = sparse_decode_reference(**dict(args, softmax_scale=576 ** -0.5))
    assert_close("lse", lse.transpose(1, 2), ref_lse, DECODE_LSE)


def test_bf16_cache_without_fp8_flag():
    args = decode_case(fmt="bf16", d_qk=576, page_block_size=16, seed=24)
    meta, _ = flash_mla.get_mla_metadata()
    rows = args["kv_cache"].view(torch.bfloat16)
    out, lse = call_decode(dict(args, kv_cache=rows), meta, is_fp8_kvcache=False)
    ref_out, _ = sparse_decode_reference(**args)
    assert_close("out", out, ref_out, DECODE_OUT)


def test_holder_config_must_match():
    args = decode_case(fmt="v32_fp8", b=3, page_block_size=16, seed=25)
    meta, _ = flash_mla.get_mla_metadata()
    call_decode(args, meta)
    fewer = dict(args, q=args["q"][:2], indices=args["indices"][:2],
                 topk_length=args["topk_length"][:2])
    with pytest.raises(ValueError, match="sched_meta.config.b = 3, but this call has 2"):
        call_decode(fewer, meta)
    shorter = dict(args, indices=args["indices"][..., :10])
    with pytest.raises(ValueError, match="sched_meta.config.topk = 64, but this call has 10"):
        call_decode(shorter, meta)


def test_argument_errors():
    args = decode_case(fmt="v4_fp8", page_block_size=16, seed=26)
    meta, _ = flash_mla.get_mla_metadata()
    with pytest.raises(TypeError, match="must be of type FlashMLASchedMeta"):
        call_decode(args, object())
    with pytest.raises(ValueError, match="num_splits must be None"):
        call_decode(args, meta, num_splits=torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="is_fp8_kvcache = False but k_cache .* is a v4_fp8"):
        call_decode(args, meta, is_fp8_kvcache=False)
    with pytest.raises(ValueError, match="h_q\\) = 0 is out of range"):
        call_decode(dict(args, q=args["q"][:, :, :0]), meta)
    with pytest.raises(ValueError, match="bytes_per_token\\) = 600"):
        call_decode(dict(args, kv_cache=torch.zeros(2, 16, 1, 600, dtype=torch.uint8)), meta)
    with pytest.raises(ValueError, match="extra_kv_cache is given without extra_indices"):
        call_decode(args, meta, extra_k_cache=args["kv_cache"])
    # Planning succeeds but the call fails (the scale is checked when it runs): the holder must
    # stay empty, or the next call would reuse a schedule that was never built.
    with pytest.raises(ValueError, match="softmax_scale = nan must be finite"):
        call_decode(args, meta, softmax_scale=float("nan"))
    assert not meta.have_initialized  # no failed call fills the holder


def test_unsupported_features_raise_not_implemented():
    args = decode_case(fmt="v32_fp8", page_block_size=16, seed=27)
    meta, _ = flash_mla.get_mla_metadata()
    with pytest.raises(NotImplementedError, match="dense decode"):
        flash_mla.flash_mla_with_kvcache(args["q"], args["kv_cache"],
                                         torch.zeros(3, 4, dtype=torch.int32),
                                         torch.full((3,), 10, dtype=torch.int32), 512, meta)
    with pytest.raises(NotImplementedError, match="causal=True"):
        call_decode(args, meta, causal=True)
    q = torch.zeros(8, 4, 192, dtype=torch.bfloat16)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="dense MHA prefill"):
        flash_mla.flash_attn_varlen_func(q, q, q[..., :128], cu, cu, 8, 8)
    with pytest.raises(NotImplementedError, match="dense MHA prefill"):
        flash_mla.flash_attn_varlen_qkvpacked_func(torch.zeros(8, 4, 512), cu, 8, 192)
    with pytest.raises(NotImplementedError, match="dense MHA prefill"):
        flash_mla.flash_attn_varlen_kvpacked_func(q, torch.zeros(8, 4, 320), cu, cu, 8, 8, 192)


def test_cache_dtypes_and_golden():
    """The golden V4 case through the compat API, cache passed as FlashMLA does: float8_e4m3fn
    [num_blocks, page_block_size, 1, 584] with the format's block stride."""
    case = "decode_d512"
    cache = golden_tensor(case, "kv_cache").view(torch.float8_e4m3fn)
    extra = golden_tensor(case, "extra_kv_cache").view(torch.int8)
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(
        golden_tensor(case, "q"), cache, None, None, 512, meta,
        softmax_scale=golden_scalar(case, "softmax_scale"), is_fp8_kvcache=True,
        indices=golden_tensor(case, "indices"), attn_sink=golden_tensor(case, "attn_sink"),
        extra_k_cache=extra, extra_indices_in_kvcache=golden_tensor(case, "extra_indices"),
        topk_length=golden_tensor(case, "topk_length"),
        extra_topk_length=golden_tensor(case, "extra_topk_length"))
    assert_close("out", out, golden_tensor(case, "out"), DECODE_OUT)
    assert_close("lse", lse, golden_tensor(case, "lse_b_h_sq"), DECODE_LSE)


def test_one_line_switch():
    """The module exposes FlashMLA's public names."""
    for name in ("get_mla_metadata", "flash_mla_with_kvcache", "flash_mla_sparse_fwd",
                 "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                 "flash_attn_varlen_kvpacked_func", "FlashMLASchedMeta"):
        assert hasattr(flash_mla, name), name
    assert sparse_mla.flash_mla is flash_mla
