"""sparse_mla.sparse_prefill on CPU tensors against the torch reference (SPEC §2, §5 recipe) and
against FlashMLA's golden outputs."""

import math

import pytest
import torch

import sparse_mla
from sparse_mla.reference import sparse_prefill_reference
from support import (PREFILL_OUT, PREFILL_STATS, assert_close, golden_scalar, golden_tensor,
                     padded, prefill_case)


def check_prefill(args, out, max_logits, lse):
    ref_out, ref_max, ref_lse = sparse_prefill_reference(**args)
    assert out.dtype == torch.bfloat16 and max_logits.dtype == lse.dtype == torch.float32
    assert_close("out", out, ref_out, PREFILL_OUT)
    assert_close("max_logits", max_logits, ref_max, PREFILL_STATS)
    assert_close("lse", lse, ref_lse, PREFILL_STATS)


@pytest.mark.parametrize(
    "shape",
    [
        dict(s_q=6, s_kv=200, h_q=16, d_qk=576, topk=64),
        dict(s_q=5, s_kv=300, h_q=64, d_qk=512, topk=100),
        dict(s_q=4, s_kv=50, h_q=128, d_qk=576, topk=37),
        dict(s_q=3, s_kv=20, h_q=8, d_qk=512, topk=100),  # s_kv < topk
        dict(s_q=7, s_kv=10, h_q=1, d_qk=576, topk=1),
        dict(s_q=130, s_kv=500, h_q=32, d_qk=512, topk=128),
    ],
    ids=lambda s: "sq{s_q}-skv{s_kv}-h{h_q}-d{d_qk}-k{topk}".format(**s),
)
def test_matches_reference(shape):
    args = prefill_case(**shape, seed=shape["topk"])
    check_prefill(args, *sparse_mla.sparse_prefill(**args))


@pytest.mark.parametrize("attn_sink", [False, True])
@pytest.mark.parametrize("topk_length", [False, True])
def test_optional_inputs(attn_sink, topk_length):
    args = prefill_case(s_q=5, s_kv=90, h_q=16, d_qk=512, topk=48, attn_sink=attn_sink,
                        topk_length=topk_length, seed=3)
    check_prefill(args, *sparse_mla.sparse_prefill(**args))


def test_edge_values():
    """Sink -inf: no effect; +inf: out 0; a query with no valid slot: out 0, lse +inf,
    max_logits -inf (SPEC §2)."""
    args = prefill_case(s_q=3, s_kv=40, h_q=4, d_qk=576, topk=16, topk_length=False, seed=5)
    args["attn_sink"] = torch.tensor([-math.inf, math.inf, 0.0, -1.0])
    out, max_logits, lse = sparse_mla.sparse_prefill(**args)
    check_prefill(args, out, max_logits, lse)
    assert torch.all(out[:, 1] == 0)
    empty = 1  # the recipe leaves query 1 without a valid slot
    assert torch.all(out[empty] == 0)
    assert torch.all(torch.isposinf(lse[empty])) and torch.all(torch.isneginf(max_logits[empty]))
    no_sink = dict(args, attn_sink=None)
    assert torch.equal(sparse_mla.sparse_prefill(**no_sink)[0][:, 0], out[:, 0])


def test_out_buffers_written_in_place():
    args = prefill_case(s_q=4, s_kv=64, h_q=8, d_qk=512, topk=32, seed=7)
    out = padded(torch.empty(4, 8, 512, dtype=torch.bfloat16))
    max_logits = padded(torch.empty(4, 8))
    lse = padded(torch.empty(4, 8))
    result = sparse_mla.sparse_prefill(**args, out=out, max_logits=max_logits, lse=lse)
    assert result[0] is out and result[1] is max_logits and result[2] is lse
    check_prefill(args, out, max_logits, lse)


def test_zero_queries():
    args = prefill_case(s_q=0, s_kv=16, h_q=4, d_qk=576, topk=8, pad=False, empty=False)
    out, max_logits, lse = sparse_mla.sparse_prefill(**args)
    assert out.shape == (0, 4, 512) and max_logits.shape == lse.shape == (0, 4)


def test_many_query_tokens():
    """s_q beyond a CUDA grid dimension's 65535 limit (SPEC §5); checked on a sample of queries,
    the last ones included."""
    args = prefill_case(s_q=70000, s_kv=64, h_q=1, d_qk=512, topk=4, pad=False, seed=8)
    out, max_logits, lse = sparse_mla.sparse_prefill(**args)
    rows = torch.cat([torch.arange(0, 70000, 97), torch.arange(69990, 70000)])
    sample = dict(args, q=args["q"][rows], indices=args["indices"][rows],
                  topk_length=args["topk_length"][rows])
    ref_out, ref_max, ref_lse = sparse_prefill_reference(**sample)
    assert_close("out", out[rows], ref_out, PREFILL_OUT)
    assert_close("max_logits", max_logits[rows], ref_max, PREFILL_STATS)
    assert_close("lse", lse[rows], ref_lse, PREFILL_STATS)


def test_duplicate_indices_count_per_occurrence():
    args = prefill_case(s_q=2, s_kv=8, h_q=2, d_qk=512, topk=6, pad=False, invalid=False,
                        empty=False, poison=False, topk_length=False, attn_sink=False)
    args["indices"] = torch.tensor([[[3, 3, 3, 1, 1, 0]], [[5, 5, 5, 5, 5, 5]]], dtype=torch.int32)
    check_prefill(args, *sparse_mla.sparse_prefill(**args))


@pytest.mark.parametrize("case", ["prefill_d576", "prefill_d512"])
def test_golden(case):
    """Within SPEC §5 tolerances of FlashMLA's sm_90a outputs."""
    args = dict(
        q=golden_tensor(case, "q"), kv=golden_tensor(case, "kv"),
        indices=golden_tensor(case, "indices"), sm_scale=golden_scalar(case, "sm_scale"),
        attn_sink=golden_tensor(case, "attn_sink"), topk_length=golden_tensor(case, "topk_length"),
    )
    out, max_logits, lse = sparse_mla.sparse_prefill(**args)
    assert_close("out", out, golden_tensor(case, "out"), PREFILL_OUT)
    assert_close("max_logits", max_logits, golden_tensor(case, "max_logits"), PREFILL_STATS)
    assert_close("lse", lse, golden_tensor(case, "lse"), PREFILL_STATS)
    check_prefill(args, out, max_logits, lse)
