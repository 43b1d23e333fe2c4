"""Torch integration: the operators' schemas and fake implementations (torch.library.opcheck),
torch.compile(fullgraph=True) over the ops, and Status -> exception mapping."""

import pytest
import torch

import sparse_mla
from support import decode_case, prefill_case


def prefill_op_args(args):
    s_q, h_q = args["q"].shape[:2]
    return (args["q"], args["kv"], args["indices"], args["sm_scale"], 512, args["attn_sink"],
            args["topk_length"], torch.empty(s_q, h_q, 512, dtype=torch.bfloat16),
            torch.empty(s_q, h_q), torch.empty(s_q, h_q))


def decode_op_args(args, workspace=None):
    b, s_q, h_q = args["q"].shape[:3]
    return (args["q"], args["kv_cache"], args["indices"], args["topk_length"], args["attn_sink"],
            args.get("extra_kv_cache"), args.get("extra_indices"),
            args.get("extra_topk_length"), None, args["softmax_scale"], 512, workspace, False,
            torch.empty(b, s_q, h_q, 512, dtype=torch.bfloat16), torch.empty(b, s_q, h_q))


def test_opcheck_sparse_prefill():
    args = prefill_case(s_q=3, s_kv=40, h_q=4, d_qk=512, topk=16, seed=31)
    torch.library.opcheck(torch.ops.sparse_mla.sparse_prefill.default, prefill_op_args(args))


def decode_alloc_op_args(args, workspace=None):
    return decode_op_args(args, workspace)[:13]


@pytest.mark.parametrize("fmt,page_block_size", [("v4_fp8", 61), ("v4_fp8", 64), ("v32_fp8", 5)])
@pytest.mark.parametrize("extra,with_workspace", [(False, False), (True, False), (False, True)])
def test_opcheck_sparse_decode(fmt, page_block_size, extra, with_workspace):
    """Multi-block caches with the format's block stride (v32 padded): opcheck's torch.clone()
    packs them, and the package reads the packed copy."""
    args = decode_case(fmt=fmt, b=2, s_q=1, h_q=4, topk=16, page_block_size=page_block_size,
                       num_blocks=3, extra=extra, extra_page_block_size=7, extra_num_blocks=4,
                       pad=True, seed=32)
    workspace = None
    if with_workspace:
        plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                      topk_length=args["topk_length"],
                                      attn_sink=args["attn_sink"])
        workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8)
    torch.library.opcheck(torch.ops.sparse_mla.sparse_decode.default,
                          decode_op_args(args, workspace))
    torch.library.opcheck(torch.ops.sparse_mla.sparse_decode_alloc.default,
                          decode_alloc_op_args(args, workspace))


@pytest.mark.parametrize("layout,extra_layout", [("page_split", "page_split"),
                                                 ("token_interleaved", "page_split")])
def test_opcheck_sparse_decode_v41(layout, extra_layout):
    """V4.1 caches with the keyword-only layout and extra-format arguments; the page_split
    caches (61 and 7 tokens per block) are packed by opcheck's clones and restaged."""
    args = decode_case(fmt="v41_fp8", b=2, s_q=2, h_q=4, topk=16, page_block_size=61,
                       num_blocks=3, kv_layout=layout, extra=True, extra_fmt="v41_fp4",
                       extra_page_block_size=7, extra_num_blocks=4, extra_kv_layout=extra_layout,
                       seed=39)
    kwargs = dict(kv_layout=layout, extra_kv_format="v41_fp4", extra_kv_layout=extra_layout)
    torch.library.opcheck(torch.ops.sparse_mla.sparse_decode.default, decode_op_args(args),
                          kwargs)
    torch.library.opcheck(torch.ops.sparse_mla.sparse_decode_alloc.default,
                          decode_alloc_op_args(args), kwargs)
    op_args = decode_op_args(args)[:9] + (512,)
    real = torch.ops.sparse_mla.plan_decode.default(*op_args, **kwargs)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                          for a in op_args)
        assert torch.ops.sparse_mla.plan_decode.default(*fake_args, **kwargs) == real


def test_opcheck_sparse_prefill_alloc():
    args = prefill_case(s_q=3, s_kv=40, h_q=4, d_qk=576, topk=16, seed=30)
    torch.library.opcheck(torch.ops.sparse_mla.sparse_prefill_alloc.default,
                          prefill_op_args(args)[:7])


@pytest.mark.parametrize("fmt,d_qk,page_block_size,pad",
                         [("v32_fp8", 576, 3, True), ("v4_fp8", 512, 61, False),
                          ("v4_fp8", 512, 2, False), ("bf16", 512, 5, True)])
def test_opcheck_kv_cache_codec(fmt, d_qk, page_block_size, pad):
    rows = (torch.randn(3, page_block_size, 1, d_qk) / 10).to(torch.bfloat16)
    stride = sparse_mla.kv_cache_block_stride(fmt, page_block_size, d_qk) + (16 if pad else 0)
    cache = sparse_mla.empty_kv_cache(3, page_block_size, fmt, d_qk=d_qk, block_stride=stride)
    torch.library.opcheck(torch.ops.sparse_mla.quantize_kv_cache.default, (rows, fmt, cache))
    sparse_mla.quantize_kv_cache(rows, fmt, out=cache)
    torch.library.opcheck(torch.ops.sparse_mla.dequantize_kv_cache.default,
                          (cache, None, torch.empty(3, page_block_size, 1, d_qk)))


@pytest.mark.parametrize("fmt,layout,page_block_size,pad",
                         [("v41_fp8", "page_split", 61, False),
                          ("v41_fp8", "page_split", 64, False),
                          ("v41_fp4", "page_split", 5, False),
                          ("v41_fp8", "token_interleaved", 3, True),
                          ("v41_fp4", "token_interleaved", 7, False)])
def test_opcheck_v41_codec(fmt, layout, page_block_size, pad):
    """The V4.1 layouts through opcheck: its clones pack a page_split cache of 61 or 5 tokens
    per block below the format's stride, and the package reads and writes the packed copy."""
    rows = (torch.randn(3, page_block_size, 1, 512) / 10).to(torch.bfloat16)
    info = sparse_mla.kv_cache_format(fmt)
    stride = sparse_mla.kv_cache_block_stride(fmt, page_block_size, kv_layout=layout)
    stride += info.alignment(layout) if pad else 0
    cache = sparse_mla.empty_kv_cache(3, page_block_size, fmt, kv_layout=layout,
                                      block_stride=stride)
    layout_kw = {"kv_layout": layout}
    torch.library.opcheck(torch.ops.sparse_mla.quantize_kv_cache.default, (rows, fmt, cache),
                          layout_kw)
    sparse_mla.quantize_kv_cache(rows, fmt, kv_layout=layout, out=cache)
    torch.library.opcheck(torch.ops.sparse_mla.dequantize_kv_cache.default,
                          (cache, None, torch.empty(3, page_block_size, 1, 512)), layout_kw)
    new_rows = (torch.randn(4, 512) / 10).to(torch.bfloat16)
    slots = torch.tensor([3 * page_block_size - 1, -1, 0, 1], dtype=torch.int32)
    torch.library.opcheck(torch.ops.sparse_mla.write_kv_cache.default,
                          (new_rows, slots, cache, fmt, layout))


@pytest.mark.parametrize("fmt,d_qk", [("v4_fp8", 512), ("v32_fp8", 576), ("bf16", 512)])
def test_opcheck_write_kv_cache(fmt, d_qk):
    cache = sparse_mla.quantize_kv_cache((torch.randn(2, 61, 1, d_qk) / 10).to(torch.bfloat16),
                                         fmt)
    rows = (torch.randn(3, d_qk) / 10).to(torch.bfloat16)
    slots = torch.tensor([100, -7, 5], dtype=torch.int32)
    torch.library.opcheck(torch.ops.sparse_mla.write_kv_cache.default, (rows, slots, cache))


def test_write_kv_cache_compiles():
    torch._dynamo.reset()
    cache = sparse_mla.empty_kv_cache(2, 64, "v41_fp8", kv_layout="token_interleaved")
    rows = (torch.randn(5, 512) / 10).to(torch.bfloat16)
    slots = torch.tensor([0, 70, -1, 3, 127], dtype=torch.int32)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(rows, slots):
        sparse_mla.write_kv_cache(rows * 2, slots, cache, "v41_fp8", "token_interleaved")

    step(rows, slots)
    want = sparse_mla.empty_kv_cache(2, 64, "v41_fp8", kv_layout="token_interleaved")
    sparse_mla.write_kv_cache(rows * 2, slots, want, "v41_fp8", "token_interleaved")
    assert torch.equal(cache, want) and cache.any()


def test_plan_decode_fake_is_the_real_plan():
    """plan_decode's fake implementation plans for the fake tensors' device from their shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = decode_case(fmt="v4_fp8", b=3, s_q=2, h_q=8, topk=16, page_block_size=64, extra=True,
                       extra_page_block_size=8, pad=False, seed=33)
    op_args = decode_op_args(args)[:9] + (512,)
    real = torch.ops.sparse_mla.plan_decode.default(*op_args)
    with FakeTensorMode() as mode:
        fake_args = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                          for a in op_args)
        fake = torch.ops.sparse_mla.plan_decode.default(*fake_args)
    assert fake == real
    # Not the AOT-dispatch checks: an operator returning strings has no traced graph form (plans
    # are made outside compiled regions, docs/python.md).
    torch.library.opcheck(torch.ops.sparse_mla.plan_decode.default, op_args,
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor"))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(backend):
    """A function calling both ops compiles without graph breaks and matches eager mode."""
    torch._dynamo.reset()
    p = prefill_case(s_q=3, s_kv=40, h_q=4, d_qk=512, topk=16, pad=False, seed=33)
    d = decode_case(fmt="v32_fp8", b=2, s_q=1, h_q=4, topk=16, page_block_size=16, pad=False,
                    seed=34)

    def step(q, kv, indices, attn_sink, q_dec, kv_cache, dec_indices, topk_length):
        out, _, lse = sparse_mla.sparse_prefill(q, kv, indices, 0.1, attn_sink=attn_sink)
        dec_out, dec_lse = sparse_mla.sparse_decode(q_dec, kv_cache, dec_indices,
                                                    topk_length=topk_length)
        return out.float() * 2, lse + 1, dec_out.float().sum(-1), dec_lse

    inputs = (p["q"], p["kv"], p["indices"], p["attn_sink"], d["q"], d["kv_cache"],
              d["indices"], d["topk_length"])
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for got, want in zip(compiled(*inputs), step(*inputs)):
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


def test_compile_v41_decode_and_write():
    """One engine step over V4.1 caches, compiled without graph breaks: write the new tokens,
    then decode with the layout keywords."""
    torch._dynamo.reset()
    d = decode_case(fmt="v41_fp8", b=2, s_q=1, h_q=8, topk=16, page_block_size=64, pad=False,
                    kv_layout="token_interleaved", extra=True, extra_fmt="v41_fp4",
                    extra_page_block_size=16, seed=40)
    rows = (torch.randn(2, 512) / 10).to(torch.bfloat16)
    slots = torch.tensor([3, -1], dtype=torch.int32)
    layouts = dict(kv_layout="token_interleaved", extra_kv_format="v41_fp4",
                   extra_kv_layout="token_interleaved")
    cache = d["kv_cache"].clone()
    want_cache = d["kv_cache"].clone()

    def step(q, rows, cache):
        sparse_mla.write_kv_cache(rows, slots, cache, "v41_fp8", "token_interleaved")
        return sparse_mla.sparse_decode(q, cache, d["indices"], topk_length=d["topk_length"],
                                        extra_kv_cache=d["extra_kv_cache"],
                                        extra_indices=d["extra_indices"],
                                        extra_topk_length=d["extra_topk_length"], **layouts)

    got = torch.compile(step, fullgraph=True, backend="aot_eager")(d["q"], rows, cache)
    want = step(d["q"], rows, want_cache)
    assert torch.equal(cache, want_cache) and not torch.equal(cache, d["kv_cache"])
    assert not got[0].isnan().any()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_compile_with_out_buffers_and_plan():
    torch._dynamo.reset()
    d = decode_case(fmt="v4_fp8", b=2, s_q=2, h_q=8, topk=16, page_block_size=8, pad=False,
                    seed=35)
    plan = sparse_mla.plan_decode(d["q"], d["kv_cache"], d["indices"],
                                  topk_length=d["topk_length"])
    out = torch.empty(2, 2, 8, 512, dtype=torch.bfloat16)
    lse = torch.empty(2, 2, 8)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def layer(q):
        sparse_mla.sparse_decode(q, d["kv_cache"], d["indices"], topk_length=d["topk_length"],
                                 plan=plan, out=out, lse=lse)
        return out.float().abs().sum()

    total = layer(d["q"])
    want_out, want_lse = sparse_mla.sparse_decode(d["q"], d["kv_cache"], d["indices"],
                                                  topk_length=d["topk_length"])
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    assert total.item() == want_out.float().abs().sum().item()


def test_errors_keep_the_library_text():
    """kInvalidArgument -> ValueError with the C++ message unchanged."""
    args = prefill_case(s_q=2, s_kv=16, h_q=4, d_qk=576, topk=8, seed=36)
    with pytest.raises(ValueError) as error:
        sparse_mla.sparse_prefill(**dict(args, q=args["q"].float()))
    assert str(error.value) == "sparse_prefill: q must be bf16, got fp32"
    with pytest.raises(ValueError) as error:
        sparse_mla.sparse_prefill(**args, d_v=256)
    assert str(error.value) == "sparse_prefill: d_v = 256 is not supported; d_v must be 512"
    big = torch.zeros(2, 129, 576, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"q.sizes\[1\] \(h_q\) = 129 is out of range \[1, 128\]"):
        sparse_mla.sparse_prefill(big, args["kv"], args["indices"], 0.1)
    with pytest.raises(ValueError, match="sparse_prefill: q has dtype Double, which no argument"):
        sparse_mla.sparse_prefill(big.double(), args["kv"], args["indices"], 0.1)
    d = decode_case(fmt="v32_fp8", b=2, page_block_size=16, seed=37)
    with pytest.raises(ValueError, match="sparse_decode: indices.sizes\\[0\\] \\(b\\) = 1, "
                                         "expected 2"):
        sparse_mla.sparse_decode(**dict(d, indices=d["indices"][:1]))


def test_outputs_untouched_on_error():
    args = prefill_case(s_q=2, s_kv=16, h_q=4, d_qk=576, topk=8, seed=38)
    out = torch.full((2, 4, 512), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError):
        sparse_mla.sparse_prefill(**dict(args, sm_scale=float("nan")), out=out)
    assert torch.all(out == 7)
