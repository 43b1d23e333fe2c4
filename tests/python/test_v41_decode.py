"""Sparse decode over DeepSeek V4.1 caches on CPU tensors against the float64 reference (SPEC §3,
§5 recipe: NaN-poisoned unused rows, invalid indices, sinks finite and ±inf, topk_length per
request and per token, empty queries): a v41_fp8 main cache with a v41_fp4 or v41_fp8 extra cache,
both page layouts (also mixed), s_q 1-4, h_q 16 and 64, odd page sizes; plans; packed
page_split copies; FlashMLA's interface with V4.1 caches."""

import pytest
import torch

import sparse_mla
import sparse_mla.flash_mla as flash_mla
from sparse_mla.reference import sparse_decode_reference
from support import DECODE_LSE, DECODE_OUT, assert_close, decode_case

PLAN_KEYS = ("topk_length", "attn_sink", "extra_kv_cache", "extra_indices", "extra_topk_length",
             "kv_format", "kv_layout", "extra_kv_format", "extra_kv_layout")


def check_decode(args, out, lse):
    ref_out, ref_lse = sparse_decode_reference(**args)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert_close("out", out, ref_out, DECODE_OUT)
    assert_close("lse", lse, ref_lse, DECODE_LSE)


CASES = {
    # V4.1's shapes: window cache of 256-token pages (topk 128 + drafts), compressed of 64.
    "window256-fp4extra64-h64": dict(page_block_size=256, topk=128, extra=True,
                                     extra_fmt="v41_fp4", extra_page_block_size=64,
                                     extra_topk=160, h_q=64, b=2, s_q=1, num_blocks=2),
    "fp4extra-sq4-token": dict(page_block_size=61, topk=37, extra=True, extra_fmt="v41_fp4",
                               extra_page_block_size=53, s_q=4, topk_length="token"),
    "fp8extra-sq3-h64": dict(page_block_size=2, topk=40, extra=True, extra_fmt="v41_fp8",
                             extra_page_block_size=1, h_q=64, s_q=3, b=2),
    "fp4extra-nolen": dict(page_block_size=64, topk=16, extra=True, extra_fmt="v41_fp4",
                           extra_page_block_size=7, topk_length=None, extra_topk_length=None,
                           extra_topk=1),
    "fp8-only-sq2": dict(page_block_size=69, topk=100, s_q=2),
    "fp4-main-only": dict(fmt="v41_fp4", page_block_size=5, topk=24, s_q=2),
    "fp4extra-scale": dict(page_block_size=16, topk=8, extra=True, extra_fmt="v41_fp4",
                           extra_page_block_size=16, softmax_scale=0.3, attn_sink=False),
}


@pytest.mark.parametrize("layout", ["page_split", "token_interleaved"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(name, layout):
    case = dict(dict(fmt="v41_fp8", h_q=16, b=3, s_q=2), **CASES[name])
    args = decode_case(**case, kv_layout=layout, seed=len(name))
    plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                  **{k: args[k] for k in PLAN_KEYS if k in args})
    assert plan.backend == "cpu"
    check_decode(args, *sparse_mla.sparse_decode(**args, plan=plan))


def test_mixed_layouts_and_inferred_extra_format():
    """Each cache has its own layout; the extra cache's format is told by its 288-byte rows."""
    args = decode_case(fmt="v41_fp8", b=2, s_q=2, h_q=16, topk=32, page_block_size=61,
                       kv_layout="token_interleaved", extra=True, extra_fmt="v41_fp4",
                       extra_page_block_size=8, extra_kv_layout="page_split", seed=70)
    check_decode(args, *sparse_mla.sparse_decode(**args))
    inferred = {k: v for k, v in args.items() if k != "extra_kv_format"}
    check_decode(args, *sparse_mla.sparse_decode(**inferred))
    # Without extra_kv_layout the extra cache is read in kv_layout: here the wrong one.
    wrong = {k: v for k, v in args.items() if k != "extra_kv_layout"}
    out, _ = sparse_mla.sparse_decode(**wrong)
    ref_out, _ = sparse_decode_reference(**args)
    assert not torch.allclose(out.float(), ref_out, atol=1e-2, equal_nan=True)


def test_layout_default_is_page_split():
    args = decode_case(fmt="v41_fp8", b=2, s_q=1, h_q=16, topk=32, page_block_size=64, extra=True,
                       extra_fmt="v41_fp4", extra_page_block_size=64, seed=71)
    assert "kv_layout" not in args
    out, lse = sparse_mla.sparse_decode(**args)
    check_decode(dict(args, kv_layout="page_split", extra_kv_layout="page_split"), out, lse)
    explicit = sparse_mla.sparse_decode(**args, kv_layout="page_split")
    assert torch.equal(out, explicit[0]) and torch.equal(lse, explicit[1])


def test_plan_reused_across_layers_and_out_buffers():
    args = decode_case(fmt="v41_fp8", b=2, s_q=2, h_q=16, topk=48, page_block_size=64,
                       kv_layout="token_interleaved", extra=True, extra_fmt="v41_fp4",
                       extra_page_block_size=64, seed=72)
    plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                  **{k: args[k] for k in PLAN_KEYS if k in args})
    first = sparse_mla.sparse_decode(**args, plan=plan)
    out = torch.empty(2, 2, 16, 512, dtype=torch.bfloat16)
    lse = torch.empty(2, 2, 16)
    for layer in range(2):
        q = (args["q"].float() * (0.5 + layer)).to(torch.bfloat16)
        sparse_mla.sparse_decode(**dict(args, q=q), plan=plan, reuse_schedule=True, out=out,
                                 lse=lse)
        check_decode(dict(args, q=q), out, lse)
    again = sparse_mla.sparse_decode(**args, plan=plan, reuse_schedule=True)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@pytest.mark.parametrize("fmt,pbs", [("v41_fp8", 61), ("v41_fp4", 5)])
def test_packed_page_split_copy_reads_like_the_view(fmt, pbs):
    """clone() packs page_split blocks below the format's stride; the package reads them."""
    args = decode_case(fmt=fmt, b=2, s_q=1, h_q=16, topk=16, page_block_size=pbs, num_blocks=3,
                       pad=False, seed=73)
    packed = args["kv_cache"].clone()
    assert packed.stride(0) < args["kv_cache"].stride(0)
    want = sparse_mla.sparse_decode(**args)
    got = sparse_mla.sparse_decode(**dict(args, kv_cache=packed))
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    torch.testing.assert_close(sparse_mla.dequantize_kv_cache(packed),
                               sparse_mla.dequantize_kv_cache(args["kv_cache"]), rtol=0, atol=0,
                               equal_nan=True)


# ---- FlashMLA's interface ------------------------------------------------------------------------


def flash_call(args, meta, **kw):
    return flash_mla.flash_mla_with_kvcache(
        args["q"], args["kv_cache"], None, None, 512, meta,
        softmax_scale=args["softmax_scale"], is_fp8_kvcache=True, indices=args["indices"],
        attn_sink=args["attn_sink"], extra_k_cache=args.get("extra_kv_cache"),
        extra_indices_in_kvcache=args.get("extra_indices"), topk_length=args["topk_length"],
        extra_topk_length=args.get("extra_topk_length"), **kw)


@pytest.mark.parametrize("layout", [None, "page_split", "token_interleaved"])
def test_flash_mla_with_v41_caches(layout):
    args = decode_case(fmt="v41_fp8", b=3, s_q=2, h_q=64, topk=64, page_block_size=64,
                       kv_layout=layout, extra=True, extra_fmt="v41_fp4",
                       extra_page_block_size=64, extra_topk=96, seed=74)
    kw = {} if layout is None else {"kv_layout": layout}
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_call(args, meta, **kw)
    assert out.shape == (3, 2, 64, 512) and lse.shape == (3, 64, 2)
    check_decode(args, out, lse.transpose(1, 2))
    again = flash_call(args, meta, **kw)  # the holder's schedule, reused
    assert torch.equal(out, again[0]) and torch.equal(lse, again[1])
    if layout is not None:
        other = "page_split" if layout == "token_interleaved" else "token_interleaved"
        with pytest.raises(ValueError, match=f"sched_meta.config.kv_layout = {layout}, but this "
                                             f"call has {other}"):
            flash_call(args, meta, kv_layout=other)


def test_flash_mla_extra_layout_keyword():
    args = decode_case(fmt="v41_fp8", b=2, s_q=1, h_q=16, topk=32, page_block_size=64,
                       kv_layout="page_split", extra=True, extra_fmt="v41_fp4",
                       extra_page_block_size=16, extra_kv_layout="token_interleaved", seed=75)
    out, lse = flash_call(args, flash_mla.get_mla_metadata()[0],
                          extra_kv_layout="token_interleaved")
    check_decode(args, out, lse.transpose(1, 2))
