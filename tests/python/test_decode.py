"""sparse_mla.plan_decode / sparse_decode on CPU tensors against the torch reference (SPEC §3,
§5 recipe), plan handling, and FlashMLA's golden decode outputs."""

import pytest
import torch

import sparse_mla
from sparse_mla.reference import sparse_decode_reference
from support import (DECODE_LSE, DECODE_OUT, assert_close, decode_case, golden_scalar,
                     golden_tensor, padded)


def check_decode(args, out, lse):
    ref_out, ref_lse = sparse_decode_reference(**args)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert_close("out", out, ref_out, DECODE_OUT)
    assert_close("lse", lse, ref_lse, DECODE_LSE)


CASES = {
    "v32-pbs61-request": dict(fmt="v32_fp8", page_block_size=61),
    "v32-pbs1-token": dict(fmt="v32_fp8", page_block_size=1, topk_length="token", h_q=8),
    "v32-pbs64-nolen-h128": dict(fmt="v32_fp8", page_block_size=64, topk_length=None, h_q=128,
                                 b=2, s_q=1),
    "v4-pbs64-extra": dict(fmt="v4_fp8", page_block_size=64, extra=True),
    "v4-pbs2-extra-request": dict(fmt="v4_fp8", page_block_size=2, extra=True,
                                  extra_topk_length="request", topk=37),
    "v4-pbs69-h64": dict(fmt="v4_fp8", page_block_size=69, h_q=64, topk=100, s_q=4, b=2),
    "v4-pbs576": dict(fmt="v4_fp8", page_block_size=576, topk=20, b=2, s_q=1, num_blocks=2),
    "v4-pbs53-nolen-extra-nolen": dict(fmt="v4_fp8", page_block_size=53, topk_length=None,
                                       extra=True, extra_topk_length=None, extra_topk=1),
    "bf16-d576-pbs53": dict(fmt="bf16", d_qk=576, page_block_size=53),
    "bf16-d512-pbs2-extra": dict(fmt="bf16", d_qk=512, page_block_size=2, extra=True),
    "v32-b321": dict(fmt="v32_fp8", b=321, s_q=1, h_q=8, topk=16, page_block_size=64),
    "v32-scale": dict(fmt="v32_fp8", softmax_scale=0.3, attn_sink=False, topk=1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(name):
    args = decode_case(**CASES[name], seed=len(name))
    plan = sparse_mla.plan_decode(
        args["q"], args["kv_cache"], args["indices"],
        **{k: args.get(k) for k in ("topk_length", "attn_sink", "extra_kv_cache",
                                    "extra_indices", "extra_topk_length")})
    assert plan.backend == "cpu"
    assert plan.workspace is None or plan.workspace.numel() == plan.workspace_bytes
    check_decode(args, *sparse_mla.sparse_decode(**args, plan=plan))


def test_without_plan_and_with_out_buffers():
    args = decode_case(fmt="v4_fp8", page_block_size=64, extra=True, seed=11)
    b, s_q, h_q, _ = args["q"].shape
    out = padded(torch.empty(b, s_q, h_q, 512, dtype=torch.bfloat16))
    lse = padded(torch.empty(b, s_q, h_q))
    result = sparse_mla.sparse_decode(**args, out=out, lse=lse)
    assert result[0] is out and result[1] is lse
    check_decode(args, out, lse)


def test_plan_reused_across_layers():
    """One plan per step, many layers: later layers pass reuse_schedule=True."""
    args = decode_case(fmt="v32_fp8", page_block_size=64, seed=12)
    plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                  topk_length=args["topk_length"], attn_sink=args["attn_sink"])
    first = sparse_mla.sparse_decode(**args, plan=plan)
    for layer in range(2):
        layer_args = dict(args, q=(args["q"].float() * (0.5 + layer)).to(torch.bfloat16))
        out, lse = sparse_mla.sparse_decode(**layer_args, plan=plan, reuse_schedule=True)
        check_decode(layer_args, out, lse)
    again = sparse_mla.sparse_decode(**args, plan=plan, reuse_schedule=True)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


def test_plan_must_match_the_call():
    args = decode_case(fmt="v32_fp8", page_block_size=64, b=3, seed=13)
    plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                  topk_length=args["topk_length"], attn_sink=args["attn_sink"])
    smaller = dict(args, q=args["q"][:2], indices=args["indices"][:2],
                   topk_length=args["topk_length"][:2])
    with pytest.raises(ValueError, match=r"do not match the plan: q has shape \(2, 2, 16, 576\)"):
        sparse_mla.sparse_decode(**smaller, plan=plan)
    with pytest.raises(ValueError, match="do not match the plan: attn_sink has shape None"):
        sparse_mla.sparse_decode(**dict(args, attn_sink=None), plan=plan)
    with pytest.raises(ValueError, match="reuse_schedule=True needs the plan"):
        sparse_mla.sparse_decode(**args, reuse_schedule=True)


def test_zero_length_requests_and_empty_queries():
    args = decode_case(fmt="v4_fp8", page_block_size=64, b=4, s_q=2, topk=32, seed=14)
    args["topk_length"] = torch.tensor([0, 32, 0, 5], dtype=torch.int32)
    out, lse = sparse_mla.sparse_decode(**args)
    check_decode(args, out, lse)
    assert torch.all(out[0] == 0) and torch.all(torch.isposinf(lse[0]))


def test_kv_format_argument():
    args = decode_case(fmt="bf16", d_qk=512, page_block_size=8, seed=15)
    check_decode(args, *sparse_mla.sparse_decode(**args, kv_format="bf16"))
    with pytest.raises(ValueError, match="kv_format = .v5. is not a KV-cache format"):
        sparse_mla.sparse_decode(**args, kv_format="v5")
    # A bf16 cache may also be passed as bf16 rows [num_blocks, pbs, 1, d_qk].
    rows = args["kv_cache"].view(torch.bfloat16)
    check_decode(dict(args, kv_cache=rows), *sparse_mla.sparse_decode(**dict(args, kv_cache=rows)))


@pytest.mark.parametrize("case", ["decode_d576", "decode_d512"])
def test_golden(case):
    """Within SPEC §5 tolerances of FlashMLA's sm_90a decode outputs (lse given [b, h_q, s_q])."""
    extra = case == "decode_d512"
    args = dict(
        q=golden_tensor(case, "q"), kv_cache=golden_tensor(case, "kv_cache"),
        indices=golden_tensor(case, "indices"), attn_sink=golden_tensor(case, "attn_sink"),
        softmax_scale=golden_scalar(case, "softmax_scale"),
        kv_format=golden_scalar(case, "format"),
    )
    if extra:
        args.update(topk_length=golden_tensor(case, "topk_length"),
                    extra_kv_cache=golden_tensor(case, "extra_kv_cache"),
                    extra_indices=golden_tensor(case, "extra_indices"),
                    extra_topk_length=golden_tensor(case, "extra_topk_length"))
    out, lse = sparse_mla.sparse_decode(**args)
    assert_close("out", out, golden_tensor(case, "out"), DECODE_OUT)
    assert_close("lse", lse.transpose(1, 2), golden_tensor(case, "lse_b_h_sq"), DECODE_LSE)
    check_decode(args, out, lse)
