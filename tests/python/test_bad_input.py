"""What the package rejects and why (docs/python.md): meta tensors mixed with real ones, outputs
that overlap themselves or alias inputs, sizes refused before anything is allocated, v4_fp8 views
that cannot be read, and calls that would need a backward. Each gets a clear error naming the
argument and the value, or (packed v4_fp8 caches, short cache storage) a correct result."""

import pytest
import torch

import sparse_mla
import sparse_mla.flash_mla as flash_mla
from sparse_mla.reference import sparse_decode_reference
from support import DECODE_LSE, DECODE_OUT, assert_close, decode_case, prefill_case


def small_prefill(**kw):
    return prefill_case(s_q=3, s_kv=40, h_q=4, d_qk=512, topk=16, pad=False, seed=50, **kw)


def small_decode(**kw):
    kw.setdefault("fmt", "v4_fp8")
    return decode_case(b=2, s_q=1, h_q=4, topk=16, page_block_size=16, pad=False, seed=51, **kw)


# ---- meta tensors ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q", "kv", "indices", "attn_sink"])
def test_prefill_meta_mixed_with_cpu(name):
    args = small_prefill()
    args[name] = args[name].to("meta")
    other = "kv" if name == "q" else name
    with pytest.raises(ValueError, match=f"sparse_prefill: {other} is on (meta|cpu) but q is on"):
        sparse_mla.sparse_prefill(**args)


def test_prefill_meta_output_with_cpu_inputs():
    args = small_prefill()
    out = torch.empty(3, 4, 512, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="sparse_prefill: out is on meta but q is on cpu"):
        sparse_mla.sparse_prefill(**args, out=out)


@pytest.mark.parametrize("name", ["q", "kv_cache", "indices", "topk_length", "extra_kv_cache"])
def test_decode_meta_mixed_with_cpu(name):
    args = small_decode(extra=True, extra_page_block_size=8)
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match="sparse_decode: .* is on (meta|cpu) but q is on"):
        sparse_mla.sparse_decode(**args)
    with pytest.raises(ValueError, match="is on (meta|cpu) but q is on"):
        flash_mla.flash_mla_with_kvcache(
            args["q"], args["kv_cache"], None, None, 512, flash_mla.get_mla_metadata()[0],
            is_fp8_kvcache=True, indices=args["indices"], topk_length=args["topk_length"],
            extra_k_cache=args["extra_kv_cache"],
            extra_indices_in_kvcache=args["extra_indices"])


def test_all_meta_gives_meta_outputs():
    """Meta tensors alone are shape propagation (what fake-tensor tracing relies on)."""
    p = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in small_prefill().items()}
    out, max_logits, lse = sparse_mla.sparse_prefill(**p)
    assert out.device.type == "meta" and out.shape == (3, 4, 512) and lse.shape == (3, 4)
    d = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in small_decode().items()}
    out, lse = sparse_mla.sparse_decode(**d)
    assert out.device.type == "meta" and out.shape == (2, 1, 4, 512) and lse.shape == (2, 1, 4)
    with pytest.raises(ValueError, match="plan_decode: q is on meta"):
        sparse_mla.plan_decode(d["q"], d["kv_cache"], d["indices"])


# ---- outputs that overlap themselves or alias inputs -------------------------------------------


def test_prefill_out_overlapping_itself():
    args = small_prefill()
    storage = torch.empty(3 * 4 * 512, dtype=torch.bfloat16)
    storage.fill_(7)
    out = storage.as_strided((3, 4, 512), (512, 256, 1))  # heads 256 apart: rows overlap
    with pytest.raises(ValueError, match=r"sparse_prefill: out has sizes \[3, 4, 512\] and "
                                         r"strides \[512, 256, 1\], so two of its elements share"):
        sparse_mla.sparse_prefill(**args, out=out)
    lse = torch.empty(6).as_strided((3, 4), (1, 1))
    with pytest.raises(ValueError, match="sparse_prefill: lse has sizes"):
        sparse_mla.sparse_prefill(**args, lse=lse)
    assert torch.all(storage == 7)


def test_decode_out_overlapping_itself():
    args = small_decode()
    out = torch.empty(2 * 4 * 512, dtype=torch.bfloat16).as_strided((2, 1, 4, 512),
                                                                     (512, 512, 128, 1))
    with pytest.raises(ValueError, match="sparse_decode: out has sizes"):
        sparse_mla.sparse_decode(**args, out=out)
    lse = torch.empty(2, 1, 4).expand(2, 1, 4).as_strided((2, 1, 4), (0, 4, 1))
    with pytest.raises(ValueError, match="sparse_decode: lse has sizes"):
        sparse_mla.sparse_decode(**args, lse=lse)


def test_prefill_out_aliasing_inputs_or_outputs():
    args = small_prefill()
    q = args["q"]
    with pytest.raises(ValueError, match="sparse_prefill: out overlaps q in memory"):
        sparse_mla.sparse_prefill(**args, out=q)  # d_qk 512: q has out's shape
    both = torch.empty(3, 4)
    with pytest.raises(ValueError, match="sparse_prefill: max_logits overlaps lse"):
        sparse_mla.sparse_prefill(**args, max_logits=both, lse=both)
    sink_and_lse = torch.empty(4 + 12)
    args["attn_sink"] = sink_and_lse[:4]
    with pytest.raises(ValueError, match="sparse_prefill: lse overlaps attn_sink"):
        sparse_mla.sparse_prefill(**args, lse=sink_and_lse[2:14].view(3, 4))
    # Disjoint parts of one buffer are fine.
    out, _, lse = sparse_mla.sparse_prefill(**args, lse=sink_and_lse[4:].view(3, 4))
    assert lse.data_ptr() == sink_and_lse[4:].data_ptr()


def test_decode_out_aliasing_inputs_and_workspace():
    args = small_decode(fmt="v32_fp8")
    with pytest.raises(ValueError, match="sparse_decode: out overlaps kv_cache in memory"):
        cache_bytes = args["kv_cache"]
        alias = cache_bytes.view(-1)[:2 * 4 * 512 * 2].view(torch.bfloat16).view(2, 1, 4, 512)
        sparse_mla.sparse_decode(**args, out=alias)
    plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                  topk_length=args["topk_length"], attn_sink=args["attn_sink"])
    if plan.workspace is not None:  # CPU plans need none: a workspace aliasing q
        pass
    lse = torch.empty(2, 1, 4)
    ws = lse.view(torch.uint8).view(-1)
    with pytest.raises(ValueError, match="sparse_decode: workspace overlaps lse"):
        torch.ops.sparse_mla.sparse_decode(
            args["q"], args["kv_cache"], args["indices"], args["topk_length"], args["attn_sink"],
            None, None, None, None, None, 512, ws, False,
            torch.empty(2, 1, 4, 512, dtype=torch.bfloat16), lse)


def test_quantize_out_aliasing_kv():
    rows = torch.zeros(1, 4, 1, 576, dtype=torch.bfloat16)
    cache = rows.view(torch.uint8).view(-1)[:4 * 656].view(1, 4, 1, 656)
    with pytest.raises(ValueError, match="quantize_kv_cache: cache overlaps kv"):
        sparse_mla.quantize_kv_cache(rows, "v32_fp8", out=cache)


# ---- sizes refused before allocating -----------------------------------------------------------


@pytest.mark.parametrize("d_v", [2**40, 2**31, 256, -1])
def test_d_v_refused_before_allocating(d_v):
    args = small_prefill()
    with pytest.raises(ValueError, match=f"sparse_prefill: d_v = {d_v} is not supported; d_v "
                                         "must be 512"):
        sparse_mla.sparse_prefill(**args, d_v=d_v)
    with pytest.raises(ValueError, match=f"d_v = {d_v} is not supported"):
        sparse_mla.sparse_prefill(**args, d_v=d_v, lse=torch.empty(3, 4))
    with pytest.raises(ValueError, match=f"d_v = {d_v} is not supported"):
        flash_mla.flash_mla_sparse_fwd(args["q"], args["kv"], args["indices"], 0.1, d_v)
    d = small_decode()
    with pytest.raises(ValueError, match=f"sparse_decode: d_v = {d_v} is not supported"):
        sparse_mla.sparse_decode(**d, d_v=d_v)
    with pytest.raises(ValueError, match=f"d_v = {d_v} is not supported"):
        sparse_mla.sparse_decode(**d, d_v=d_v, lse=torch.empty(2, 1, 4))
    with pytest.raises(ValueError, match=f"_decode: d_v = {d_v} is not supported"):
        sparse_mla.plan_decode(d["q"], d["kv_cache"], d["indices"], d_v=d_v)


def test_huge_head_count_refused_before_allocating():
    """q of 2**31 heads (an expanded view, no memory): its h_q is reported, not the 2 TB out."""
    args = small_prefill()
    q = torch.zeros(1, 1, 512, dtype=torch.bfloat16).expand(3, 2**31, 512)
    with pytest.raises(ValueError, match=r"q.sizes\[1\] \(h_q\) = 2147483648 is out of range"):
        sparse_mla.sparse_prefill(**dict(args, q=q))
    d = small_decode()
    q = torch.zeros(1, 1, 1, 512, dtype=torch.bfloat16).expand(2, 1, 2**31, 512)
    with pytest.raises(ValueError, match=r"\(h_q\) = 2147483648 is out of range"):
        sparse_mla.sparse_decode(**dict(d, q=q))


# ---- v4_fp8 views ------------------------------------------------------------------------------


def test_v4_page_slice_rejected():
    """cache[:, :k] of a v4_fp8 cache keeps rows whose scales sit after all 64 rows of a block."""
    d = decode_case(fmt="v4_fp8", b=2, s_q=1, h_q=4, topk=16, page_block_size=64, pad=False,
                    num_blocks=3, seed=52)
    sliced = d["kv_cache"][:, :32]
    indices = d["indices"] % (3 * 32)
    message = (r"kv_cache.stride\(0\) = 37440 \(37440 bytes\) is not the v4_fp8 block stride "
               r"19008 for page_block_size 32")
    with pytest.raises(ValueError, match=message):
        sparse_mla.sparse_decode(**dict(d, kv_cache=sliced, indices=indices))
    with pytest.raises(ValueError, match=message):
        flash_mla.flash_mla_with_kvcache(d["q"], sliced, None, None, 512,
                                         flash_mla.get_mla_metadata()[0], is_fp8_kvcache=True,
                                         indices=indices)
    with pytest.raises(ValueError, match=r"cache.stride\(0\) = 37440 .* not the v4_fp8 block"):
        sparse_mla.dequantize_kv_cache(sliced)
    # One block sliced: the single block's stride still tells.
    with pytest.raises(ValueError, match="not the v4_fp8 block stride"):
        sparse_mla.dequantize_kv_cache(d["kv_cache"][:1, :32])
    # Whole pages of some blocks are fine.
    assert sparse_mla.dequantize_kv_cache(d["kv_cache"][1:]).shape == (2, 64, 1, 512)


def test_v4_packed_clone_reads_like_the_view():
    """clone() packs a v4_fp8 cache's blocks; the package reads the packed blocks correctly."""
    d = decode_case(fmt="v4_fp8", b=2, s_q=1, h_q=4, topk=16, page_block_size=61, pad=False,
                    num_blocks=3, seed=53)
    packed = d["kv_cache"].clone()
    assert packed.stride(0) == 61 * 584
    want_out, want_lse = sparse_mla.sparse_decode(**d)
    out, lse = sparse_mla.sparse_decode(**dict(d, kv_cache=packed))
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    torch.testing.assert_close(sparse_mla.dequantize_kv_cache(packed),
                               sparse_mla.dequantize_kv_cache(d["kv_cache"]), rtol=0, atol=0,
                               equal_nan=True)
    rows = (torch.randn(3, 61, 1, 512) / 10).to(torch.bfloat16)
    target = torch.zeros_like(packed)
    sparse_mla.quantize_kv_cache(rows, "v4_fp8", out=target)
    assert torch.equal(target, sparse_mla.quantize_kv_cache(rows, "v4_fp8").clone())


def test_packed_v4_matches_reference():
    d = decode_case(fmt="v4_fp8", b=2, s_q=2, h_q=8, topk=24, page_block_size=5, pad=False,
                    extra=True, extra_page_block_size=3, seed=54)
    packed = dict(d, kv_cache=d["kv_cache"].clone(), extra_kv_cache=d["extra_kv_cache"].clone())
    out, lse = sparse_mla.sparse_decode(**packed)
    ref_out, ref_lse = sparse_decode_reference(**d)
    assert_close("out", out, ref_out, DECODE_OUT)
    assert_close("lse", lse, ref_lse, DECODE_LSE)


# ---- autograd -----------------------------------------------------------------------------------


def test_requires_grad_raises_not_implemented():
    args = small_prefill()
    q = args["q"].float().requires_grad_()
    with pytest.raises(NotImplementedError,
                       match=r"sparse_prefill: backward is not implemented \(q requires grad\)"):
        sparse_mla.sparse_prefill(**dict(args, q=q.bfloat16()))
    sink = args["attn_sink"].clone().requires_grad_()
    with pytest.raises(NotImplementedError, match=r"attn_sink requires grad"):
        sparse_mla.sparse_prefill(**dict(args, attn_sink=sink))
    with torch.no_grad():
        out, _, _ = sparse_mla.sparse_prefill(**dict(args, attn_sink=sink))
    assert not out.requires_grad
    d = small_decode()
    with pytest.raises(NotImplementedError, match=r"sparse_decode: backward is not implemented"):
        sparse_mla.sparse_decode(**dict(d, q=d["q"].float().requires_grad_().bfloat16()))
    rows = torch.zeros(1, 2, 1, 512, requires_grad=True).bfloat16()
    with pytest.raises(NotImplementedError, match=r"quantize_kv_cache: backward is not"):
        sparse_mla.quantize_kv_cache(rows, "v4_fp8")
    # Planning reads shapes only.
    plan = sparse_mla.plan_decode(d["q"].float().requires_grad_().bfloat16(), d["kv_cache"],
                                  d["indices"])
    assert plan.backend == "cpu"
