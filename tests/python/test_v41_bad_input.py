"""DeepSeek V4.1 caches given wrongly: layout names, layouts a format lacks, formats an extra
cache cannot have, block strides a layout does not allow. Each error names the argument and the
value and comes before anything is read, written or allocated. (The caches are made by the
torch reference quantizer: these calls never get as far as the codec or the kernels.)"""

import pytest
import torch

import sparse_mla
import sparse_mla.flash_mla as flash_mla
from support import decode_case


def v41_case(**kw):
    kw = dict(dict(fmt="v41_fp8", b=2, s_q=1, h_q=16, topk=16, page_block_size=64,
                   num_blocks=3, pad=False, quantizer="reference", seed=60), **kw)
    return decode_case(**kw)


def plan(args, **kw):
    keys = ("topk_length", "attn_sink", "extra_kv_cache", "extra_indices", "extra_topk_length",
            "kv_format", "kv_layout", "extra_kv_format", "extra_kv_layout")
    call = dict({k: args[k] for k in keys if k in args}, **kw)
    return sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"], **call)


@pytest.mark.parametrize("entry", ["sparse_decode", "plan_decode", "flash_mla"])
def test_unknown_layout_names(entry):
    args = v41_case(extra=True, extra_fmt="v41_fp4", extra_page_block_size=8)

    def call(**kw):
        if entry == "sparse_decode":
            return sparse_mla.sparse_decode(**dict(args, **kw))
        if entry == "plan_decode":
            return plan(args, **kw)
        kw.pop("extra_kv_format", None)
        return flash_mla.flash_mla_with_kvcache(
            args["q"], args["kv_cache"], None, None, 512, flash_mla.get_mla_metadata()[0],
            is_fp8_kvcache=True, indices=args["indices"], extra_k_cache=args["extra_kv_cache"],
            extra_indices_in_kvcache=args["extra_indices"], **kw)

    op = "plan_decode" if entry == "flash_mla" else entry  # the holder's first call plans
    with pytest.raises(ValueError, match=f'{op}: kv_layout = "interleaved" is not a KV-cache '
                                         r'layout \(page_split, token_interleaved\)'):
        call(kv_layout="interleaved")
    with pytest.raises(ValueError, match=f'{op}: extra_kv_layout = "split" is not a KV-cache '
                                         "layout"):
        call(extra_kv_layout="split")
    if entry != "flash_mla":
        with pytest.raises(ValueError, match=f'{op}: extra_kv_format = "v41_fp2" is not a '
                                             "KV-cache format"):
            call(extra_kv_format="v41_fp2")


def test_layout_the_format_lacks():
    args = decode_case(fmt="v4_fp8", b=2, s_q=1, h_q=16, topk=16, page_block_size=64,
                       pad=False, seed=61)
    with pytest.raises(ValueError, match='sparse_decode: kv_layout = "token_interleaved" is not a '
                                         r"layout of v4_fp8 \(its layout is page_split\)"):
        sparse_mla.sparse_decode(**args, kv_layout="token_interleaved")
    v32 = decode_case(fmt="v32_fp8", b=2, s_q=1, h_q=16, topk=16, page_block_size=8, seed=62)
    with pytest.raises(ValueError, match='kv_layout = "page_split" is not a layout of v32_fp8'):
        sparse_mla.sparse_decode(**v32, kv_layout="page_split")
    with pytest.raises(ValueError, match="kv_layout = 'page_split' is not a layout of v32_fp8"):
        sparse_mla.dequantize_kv_cache(v32["kv_cache"], kv_layout="page_split")
    with pytest.raises(ValueError, match="kv_layout = 'page_split' is not a layout of bf16"):
        sparse_mla.quantize_kv_cache(torch.zeros(1, 2, 1, 512, dtype=torch.bfloat16), "bf16",
                                     kv_layout="page_split")
    # The extra cache is read in its own format: a wrong one is named with the cache's bytes.
    mixed = v41_case(extra=True, extra_fmt="v41_fp4", extra_page_block_size=8)
    with pytest.raises(ValueError, match=r"sparse_decode: extra_kv_cache.shape\[3\] = 288 gives "
                                         "288 bytes per token, but v4_fp8 stores 584"):
        sparse_mla.sparse_decode(**dict(mixed, extra_kv_format="v4_fp8"))


def test_extra_cache_format_must_go_with_the_main_one():
    """Only a v41_fp8 main cache takes another extra format (v41_fp4)."""
    args = decode_case(fmt="v4_fp8", b=2, s_q=1, h_q=16, topk=16, page_block_size=64,
                       pad=False, extra=True, extra_fmt="v41_fp4", extra_page_block_size=8,
                       quantizer="reference", seed=63)
    message = ("extra_kv_cache.format = v41_fp4 cannot go with kv_cache.format = v4_fp8 "
               r"\(the extra cache has the main cache's format\)")
    with pytest.raises(ValueError, match=message):
        sparse_mla.sparse_decode(**args)
    with pytest.raises(ValueError, match=message):
        plan(args)
    fp4_main = v41_case(fmt="v41_fp4", extra=True, extra_fmt="v41_fp8", extra_page_block_size=8)
    with pytest.raises(ValueError, match="extra_kv_cache.format = v41_fp8 cannot go with "
                                         "kv_cache.format = v41_fp4"):
        sparse_mla.sparse_decode(**fp4_main)


def test_block_strides():
    args = v41_case(page_block_size=61)
    cache = args["kv_cache"]
    assert cache.stride(0) == 32256
    # page_split: a padded stride and a page slice look alike; both refused.
    storage = torch.zeros(3 * (32256 + 512), dtype=torch.uint8)
    padded = storage.as_strided((3, 61, 1, 528), (32256 + 512, 528, 528, 1))
    with pytest.raises(ValueError, match=r"kv_cache.stride\(0\) = 32768 \(32768 bytes\) is not "
                                         "the v41_fp8 page_split block stride 32256 for "
                                         "page_block_size 61"):
        sparse_mla.sparse_decode(**dict(args, kv_cache=padded))
    with pytest.raises(ValueError, match="is not the v41_fp8 page_split block stride 16384 for "
                                         "page_block_size 31"):
        sparse_mla.dequantize_kv_cache(cache[:, :31])
    # token_interleaved: any multiple of the record (528 B) from pbs * 528 up.
    storage = torch.zeros(3 * 61 * 528 + 3 * 100, dtype=torch.uint8)
    odd = storage.as_strided((3, 61, 1, 528), (61 * 528 + 100, 528, 528, 1))
    with pytest.raises(ValueError, match=r"kv_cache.block_stride_bytes = 32308 is not a multiple "
                                         "of 528 as v41_fp8 token_interleaved requires"):
        sparse_mla.sparse_decode(**dict(args, kv_cache=odd, kv_layout="token_interleaved"))
    with pytest.raises(ValueError, match="not a multiple of 288 as v41_fp4 token_interleaved"):
        fp4 = torch.zeros(2 * 2 * 300, dtype=torch.uint8).as_strided((2, 2, 1, 288),
                                                                   (600, 288, 288, 1))
        sparse_mla.dequantize_kv_cache(fp4, kv_layout="token_interleaved")
    with pytest.raises(ValueError, match=r"cache.shape\[-1\] \(bytes_per_token\) = 300 matches no "
                                         r"KV-cache format \(656 v32_fp8, 584 v4_fp8, 528 "
                                         "v41_fp8, 288 v41_fp4"):
        sparse_mla.dequantize_kv_cache(torch.zeros(2, 2, 1, 300, dtype=torch.uint8),
                                       kv_format=None, dtype=torch.float32)


def test_bad_layout_before_allocating():
    """A layout error comes before the output is allocated, also for sizes that could not be."""
    args = v41_case()
    q = torch.zeros(1, 1, 1, 512, dtype=torch.bfloat16).expand(2, 1, 2**31, 512)
    with pytest.raises(ValueError, match='kv_layout = "diagonal" is not a KV-cache layout'):
        sparse_mla.sparse_decode(**dict(args, q=q, kv_layout="diagonal"))


def test_quantize_checks_d_qk_before_allocating():
    rows = torch.zeros(1, 1, 1, 576, dtype=torch.bfloat16).expand(2**20, 2**20, 1, 576)
    with pytest.raises(ValueError, match=r"quantize_kv_cache: kv.shape\[3\] \(d_qk\) = 576, "
                                         "but v41_fp4 stores d_qk = 512"):
        sparse_mla.quantize_kv_cache(rows, "v41_fp4")  # a cache of 2^40 tokens is never made
