"""CUDA tensors: the CUDA back end against the torch reference, torch's current stream, CUDA-graph
capture of a decode step (explicit plan and FlashMLA's lazily filled holder), the device codec
and cache writer (V4.1 records in both layouts; the writer captured in a CUDA graph), and
torch.compile. Marked `gpu`: skipped where torch sees no CUDA device."""

import pytest
import torch

import sparse_mla
import sparse_mla.flash_mla as flash_mla
from sparse_mla.reference import (quantize_kv_cache_reference, sparse_decode_reference,
                                  sparse_prefill_reference)
from support import (DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STATS, assert_close,
                     decode_case, prefill_case)

pytestmark = pytest.mark.gpu


def to_cuda(args):
    """The same arguments on the GPU; caches keep their block stride (copied storage-wise)."""
    moved = {}
    for key, value in args.items():
        if isinstance(value, torch.Tensor) and key.endswith("kv_cache"):
            storage = value.as_strided((value.shape[0] * value.stride(0),), (1,)).cuda()
            moved[key] = storage.as_strided(value.shape, value.stride())
        elif isinstance(value, torch.Tensor):
            moved[key] = value.cuda()
        else:
            moved[key] = value
    return moved


@pytest.mark.parametrize("h_q,d_qk,topk", [(8, 576, 64), (64, 512, 100), (128, 576, 128),
                                            (16, 512, 37)])
def test_prefill_matches_reference(h_q, d_qk, topk):
    args = prefill_case(s_q=70, s_kv=300, h_q=h_q, d_qk=d_qk, topk=topk, seed=h_q)
    out, max_logits, lse = sparse_mla.sparse_prefill(**to_cuda(args))
    assert out.is_cuda
    ref_out, ref_max, ref_lse = sparse_prefill_reference(**args)
    assert_close("out", out, ref_out, PREFILL_OUT)
    assert_close("max_logits", max_logits, ref_max, PREFILL_STATS)
    assert_close("lse", lse, ref_lse, PREFILL_STATS)


def test_prefill_many_query_tokens():
    """s_q beyond a grid dimension's 65535 limit; checked on a sample of queries, the last ones
    included."""
    args = prefill_case(s_q=70000, s_kv=64, h_q=16, d_qk=512, topk=64, pad=False, seed=40)
    out, max_logits, lse = sparse_mla.sparse_prefill(**to_cuda(args))
    rows = torch.cat([torch.arange(0, 70000, 97), torch.arange(69990, 70000)])
    sample = dict(args, q=args["q"][rows], indices=args["indices"][rows],
                  topk_length=args["topk_length"][rows])
    ref_out, ref_max, ref_lse = sparse_prefill_reference(**sample)
    assert_close("out", out[rows.cuda()], ref_out, PREFILL_OUT)
    assert_close("max_logits", max_logits[rows.cuda()], ref_max, PREFILL_STATS)
    assert_close("lse", lse[rows.cuda()], ref_lse, PREFILL_STATS)


@pytest.mark.parametrize("case", [
    dict(fmt="v32_fp8", h_q=64, page_block_size=64),
    dict(fmt="v4_fp8", h_q=64, page_block_size=64, extra=True),
    dict(fmt="v4_fp8", h_q=128, page_block_size=61, s_q=4, topk_length="token"),
    dict(fmt="bf16", d_qk=576, h_q=16, page_block_size=53),
    dict(fmt="v41_fp8", h_q=64, page_block_size=256, topk=128, extra=True, extra_fmt="v41_fp4",
         extra_page_block_size=64, extra_topk=192, b=2, num_blocks=2),
    dict(fmt="v41_fp8", h_q=16, page_block_size=61, s_q=4, topk_length="token", extra=True,
         extra_fmt="v41_fp4", extra_page_block_size=64, kv_layout="token_interleaved"),
    dict(fmt="v41_fp8", h_q=64, page_block_size=64, s_q=3, extra=True, extra_fmt="v41_fp8",
         extra_page_block_size=53, extra_kv_layout="token_interleaved"),
    dict(fmt="v41_fp4", h_q=16, page_block_size=5, kv_layout="token_interleaved"),
])
def test_decode_matches_reference(case):
    args = decode_case(**case, seed=41)
    cuda_args = to_cuda(args)
    plan = sparse_mla.plan_decode(
        cuda_args["q"], cuda_args["kv_cache"], cuda_args["indices"],
        **{k: cuda_args.get(k) for k in ("topk_length", "attn_sink", "extra_kv_cache",
                                         "extra_indices", "extra_topk_length", "kv_layout",
                                         "extra_kv_format", "extra_kv_layout")})
    assert plan.backend == "cuda"
    out, lse = sparse_mla.sparse_decode(**cuda_args, plan=plan)
    ref_out, ref_lse = sparse_decode_reference(**args)
    assert_close("out", out, ref_out, DECODE_OUT)
    assert_close("lse", lse, ref_lse, DECODE_LSE)


def test_runs_on_the_current_stream():
    """Inputs written on a side stream right before the call are seen by the kernel."""
    args = to_cuda(prefill_case(s_q=64, s_kv=256, h_q=64, d_qk=576, topk=128, seed=42))
    expected = sparse_mla.sparse_prefill(**args)[0]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # keeps the stream busy: a kernel on another stream races
        q = args["q"] * 1  # produced on `stream`
        out = sparse_mla.sparse_prefill(**dict(args, q=q))[0]
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("cache", [dict(fmt="v4_fp8"),
                                   dict(fmt="v41_fp8", extra_fmt="v41_fp4",
                                        kv_layout="token_interleaved")])
def test_decode_step_in_cuda_graph(cache):
    """Plan once, capture two layers (build + reuse the schedule), replay with new queries."""
    args = to_cuda(decode_case(**cache, b=8, s_q=1, h_q=64, topk=64, page_block_size=64,
                               extra=True, pad=False, seed=43))
    keys = ("topk_length", "attn_sink", "extra_kv_cache", "extra_indices", "extra_topk_length",
            "kv_layout", "extra_kv_format")
    plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"],
                                  **{k: args[k] for k in keys if k in args})
    q0, q1 = args["q"].clone(), (args["q"] * 0.5).contiguous()
    outs = [torch.empty(8, 1, 64, 512, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    lses = [torch.empty(8, 1, 64, device="cuda") for _ in range(2)]

    def step():
        for layer, q in enumerate((q0, q1)):
            sparse_mla.sparse_decode(**dict(args, q=q), plan=plan, reuse_schedule=layer > 0,
                                     out=outs[layer], lse=lses[layer])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    q0.copy_(torch.randn_like(q0, dtype=torch.float32).clamp(-1, 1).to(torch.bfloat16))
    q1.copy_(q0 * 2)
    graph.replay()
    torch.cuda.synchronize()
    for q, out, lse in zip((q0, q1), outs, lses):
        ref_out, ref_lse = sparse_decode_reference(**dict(args, q=q))  # torch ops, on the GPU
        assert_close("out", out, ref_out, DECODE_OUT)
        assert_close("lse", lse, ref_lse, DECODE_LSE)


def test_flash_mla_holder_filled_inside_capture():
    """vLLM's pattern: get_mla_metadata() per step, the first call inside the captured graph."""
    args = to_cuda(decode_case(fmt="v32_fp8", b=4, s_q=2, h_q=64, topk=64, page_block_size=64,
                               pad=False, seed=44))
    expected = flash_mla.flash_mla_with_kvcache(
        args["q"], args["kv_cache"], None, None, 512, flash_mla.get_mla_metadata()[0],
        is_fp8_kvcache=True, indices=args["indices"], attn_sink=args["attn_sink"],
        topk_length=args["topk_length"])
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph):
            meta, _ = flash_mla.get_mla_metadata()
            results = [flash_mla.flash_mla_with_kvcache(
                args["q"], args["kv_cache"], None, None, 512, meta, is_fp8_kvcache=True,
                indices=args["indices"], attn_sink=args["attn_sink"],
                topk_length=args["topk_length"]) for _ in range(2)]
    torch.cuda.current_stream().wait_stream(side)
    graph.replay()
    torch.cuda.synchronize()
    for out, lse in results:
        assert torch.equal(out, expected[0]) and torch.equal(lse, expected[1])


def whole_storage(cache):
    return cache.view(torch.uint8).as_strided((cache.shape[0] * cache.stride(0),), (1,))


@pytest.mark.parametrize("fmt,layout", [("v4_fp8", None), ("v32_fp8", None),
                                        ("v41_fp8", "page_split"),
                                        ("v41_fp8", "token_interleaved"),
                                        ("v41_fp4", "page_split"),
                                        ("v41_fp4", "token_interleaved")])
def test_codec_on_cuda_tensors(fmt, layout):
    """The device codec (kernels on the current stream, no host staging) makes the host codec's
    bytes, every byte of every block; the V4.1 records also the torch reference's."""
    d_qk = 576 if fmt == "v32_fp8" else 512
    rows = (torch.randn(3, 61, 1, d_qk) * torch.tensor([1e-6, 0.1, 30.0])[:, None, None, None])
    rows[0, 0, 0, :40] = float("nan")
    rows[1, 1, 0, 3] = float("inf")
    rows = rows.to(torch.bfloat16)
    if fmt in ("v4_fp8", "v32_fp8"):
        rows = rows.nan_to_num()
    host = sparse_mla.quantize_kv_cache(rows, fmt, kv_layout=layout)
    device = sparse_mla.quantize_kv_cache(rows.cuda(), fmt, kv_layout=layout)
    assert device.is_cuda and device.stride() == host.stride()
    assert torch.equal(whole_storage(device).cpu(), whole_storage(host))
    if fmt.startswith("v41"):
        reference = quantize_kv_cache_reference(rows, fmt, kv_layout=layout)
        assert torch.equal(whole_storage(device).cpu(), whole_storage(reference))
    for dtype in (torch.float32, torch.bfloat16):
        torch.testing.assert_close(
            sparse_mla.dequantize_kv_cache(device, kv_layout=layout, dtype=dtype).cpu(),
            sparse_mla.dequantize_kv_cache(host, kv_layout=layout, dtype=dtype),
            rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fmt,layout", [("v41_fp8", "page_split"), ("v41_fp4", "token_interleaved"),
                                        ("v4_fp8", None)])
def test_write_kv_cache_in_cuda_graph(fmt, layout):
    """The writer allocates nothing and does not synchronise: captured once, replayed with new
    rows and slots, it writes what the host writer writes (slots < 0 skipped)."""
    num_blocks, pbs, n = 4, 64, 16
    cache = sparse_mla.empty_kv_cache(num_blocks, pbs, fmt, kv_layout=layout, device="cuda")
    host = sparse_mla.empty_kv_cache(num_blocks, pbs, fmt, kv_layout=layout)
    rows = torch.zeros(n, 512, dtype=torch.bfloat16, device="cuda")
    slots = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    sparse_mla.write_kv_cache(rows, slots, cache, fmt, layout)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph):
            sparse_mla.write_kv_cache(rows, slots, cache, fmt, layout)
    torch.cuda.current_stream().wait_stream(side)
    for step in range(2):
        new_rows = (torch.randn(n, 512) / 10).to(torch.bfloat16)
        new_slots = torch.randperm(num_blocks * pbs)[:n].to(torch.int32)
        new_slots[step::5] = -1
        rows.copy_(new_rows)
        slots.copy_(new_slots)
        graph.replay()
        sparse_mla.write_kv_cache(new_rows, new_slots, host, fmt, layout)
    torch.cuda.synchronize()
    assert torch.equal(whole_storage(cache).cpu(), whole_storage(host))
    # A slot past the cache cannot be reported without a synchronisation: skipped on the device.
    written = whole_storage(cache).clone()
    sparse_mla.write_kv_cache(rows[:1], torch.tensor([num_blocks * pbs + 3], dtype=torch.int32,
                                                     device="cuda"), cache, fmt, layout)
    assert torch.equal(whole_storage(cache), written)


def test_compile_fullgraph_on_cuda():
    torch._dynamo.reset()
    args = to_cuda(decode_case(fmt="v32_fp8", b=2, s_q=1, h_q=64, topk=64, page_block_size=64,
                               pad=False, seed=45))

    @torch.compile(fullgraph=True, backend="aot_eager")
    def run(q):
        out, lse = sparse_mla.sparse_decode(q, args["kv_cache"], args["indices"],
                                            topk_length=args["topk_length"])
        return out.float() * 2, lse

    out, lse = run(args["q"])
    want_out, want_lse = sparse_mla.sparse_decode(args["q"], args["kv_cache"], args["indices"],
                                                  topk_length=args["topk_length"])
    assert torch.equal(out, want_out.float() * 2) and torch.equal(lse, want_lse)


def test_bad_input_on_cuda():
    """The classes of test_bad_input.py with CUDA tensors: devices mixed (meta or CPU), a
    page-sliced v4_fp8 cache, outputs aliasing inputs; a packed v4_fp8 copy reads as the view."""
    args = to_cuda(decode_case(fmt="v4_fp8", b=2, s_q=1, h_q=16, topk=32, page_block_size=64,
                               num_blocks=3, pad=False, seed=46))
    for name, device in (("kv_cache", "meta"), ("indices", "cpu")):
        with pytest.raises(ValueError, match=f"{name} is on (meta|cpu).* but q is on cuda"):
            sparse_mla.sparse_decode(**dict(args, **{name: args[name].to(device)}))
    with pytest.raises(ValueError, match="is not the v4_fp8 block stride"):
        sparse_mla.sparse_decode(**dict(args, kv_cache=args["kv_cache"][:, :32],
                                        indices=args["indices"] % 96))
    with pytest.raises(ValueError, match="sparse_decode: out overlaps q"):
        q = args["q"]
        sparse_mla.sparse_decode(**args, out=q.view(-1)[:2 * 16 * 512].view(2, 1, 16, 512))
    want_out, want_lse = sparse_mla.sparse_decode(**args)
    out, lse = sparse_mla.sparse_decode(**dict(args, kv_cache=args["kv_cache"].clone()))
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
