"""The eager-call module (python/csrc/eager_calls.cpp): the operators called without the
dispatcher (prefill and decode, allocating or into given outputs, the cache writer) give the
operators' results and errors bit for bit, and hand every call that needs the dispatcher back
(NotImplemented): tensor subclasses, grad, meta tensors, dispatch modes."""

import os
import sysconfig

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import sparse_mla
import sparse_mla.ops as ops
from support import decode_case, prefill_case

EAGER = ops._sparse_mla_eager


def test_module_is_built_where_python_headers_exist():
    headers = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    assert (EAGER is not None) == headers, \
        f"_sparse_mla_eager imported: {EAGER is not None}, Python.h present: {headers}"


needs_eager = pytest.mark.skipif(EAGER is None, reason="built without Python's headers")


def decode_positional(args, workspace=None, reuse=False):
    return [args["q"], args["kv_cache"], args["indices"], args["topk_length"],
            args["attn_sink"], args.get("extra_kv_cache"), args.get("extra_indices"),
            args.get("extra_topk_length"), None, args["softmax_scale"], 512, workspace, reuse,
            args.get("kv_layout"), args.get("extra_kv_format"), args.get("extra_kv_layout")]


def through_dispatcher(positional):
    layouts = {k: v for k, v in zip(("kv_layout", "extra_kv_format", "extra_kv_layout"),
                                    positional[13:]) if v is not None}
    return ops._DECODE_ALLOC(*positional[:13], **layouts)


def bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def assert_identical(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(bits(g), bits(w)), "outputs differ from the operator's"


@needs_eager
@pytest.mark.parametrize("fmt,extra,layout", [("v32_fp8", False, None), ("v4_fp8", True, None),
                                              ("bf16", False, None),
                                              ("v41_fp8", True, "token_interleaved")])
def test_decode_matches_the_operator(fmt, extra, layout):
    args = decode_case(fmt=fmt, b=2, s_q=2, h_q=8, topk=24, page_block_size=16, extra=extra,
                       extra_topk=8, extra_page_block_size=4, kv_layout=layout,
                       extra_fmt="v41_fp4" if fmt == "v41_fp8" else None, seed=7)
    positional = decode_positional(args)
    got = EAGER.sparse_decode_alloc(*positional)
    assert got is not NotImplemented
    want = through_dispatcher(positional)
    assert_identical(got, want)
    # Into given outputs (sentinel-filled), the plain operator's form.
    out, lse = torch.full_like(want[0], 7.0), torch.full_like(want[1], 7.0)
    assert EAGER.sparse_decode(*positional[:13], out, lse, *positional[13:]) is None
    assert_identical((out, lse), want)


@needs_eager
def test_prefill_matches_the_operator():
    a = prefill_case(s_q=3, s_kv=40, h_q=16, d_qk=576, topk=9, seed=3)
    positional = (a["q"], a["kv"], a["indices"], a["sm_scale"], 512, a["attn_sink"],
                  a["topk_length"])
    got = EAGER.sparse_prefill_alloc(*positional)
    assert got is not NotImplemented
    want = ops._PREFILL_ALLOC(*positional)
    assert_identical(got, want)
    outputs = [torch.full_like(w, 7.0) for w in want]
    assert EAGER.sparse_prefill(*positional, *outputs) is None
    assert_identical(outputs, want)


@needs_eager
@pytest.mark.parametrize("fmt", ["v32_fp8", "v4_fp8", "v41_fp4"])
def test_cache_writer_matches_the_operator(fmt):
    info = sparse_mla.kv_cache_format(fmt)
    rows = (torch.randn(9, info.d_qk, generator=torch.Generator().manual_seed(5)) / 10).to(
        torch.bfloat16)
    slots = torch.tensor([3, -1, 17, 0, 40, 41, 5, -7, 12], dtype=torch.int32)
    want, got = sparse_mla.empty_kv_cache(8, 6, fmt), sparse_mla.empty_kv_cache(8, 6, fmt)
    torch.ops.sparse_mla.write_kv_cache.default(rows, slots, want, fmt, None)
    assert EAGER.write_kv_cache(rows, slots, got, fmt, None) is None
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    with pytest.raises(ValueError, match="write_kv_cache"):
        EAGER.write_kv_cache(rows[:, :100], slots, got, fmt, None)


@needs_eager
def test_errors_are_the_operators():
    a = prefill_case(s_q=2, s_kv=7, h_q=4, d_qk=512, topk=4, seed=1)
    bad = (a["q"], a["kv"], a["indices"][:1], a["sm_scale"], 512, None, None)
    with pytest.raises(ValueError) as eager_error:
        EAGER.sparse_prefill_alloc(*bad)
    with pytest.raises(ValueError) as op_error:
        ops._PREFILL_ALLOC(*bad)
    assert str(eager_error.value).split("\n")[0] == str(op_error.value).split("\n")[0]
    with pytest.raises(ValueError, match="d_v = 256"):
        EAGER.sparse_prefill_alloc(a["q"], a["kv"], a["indices"], a["sm_scale"], 256, None, None)
    with pytest.raises(TypeError, match="takes 7 arguments"):
        EAGER.sparse_prefill_alloc(a["q"])
    with pytest.raises(TypeError):
        EAGER.sparse_prefill_alloc(a["q"], a["kv"], a["indices"], "scale", 512, None, None)


class Marked(torch.Tensor):
    """A tensor subclass: the dispatcher (and torch_function) must see it."""


class CountingMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


@needs_eager
def test_calls_needing_the_dispatcher_are_handed_back():
    args = decode_case(fmt="v4_fp8", b=1, s_q=1, h_q=4, topk=8, page_block_size=16, seed=2)

    def with_q(q):
        positional = decode_positional(args)
        positional[0] = q
        return EAGER.sparse_decode_alloc(*positional)

    q = args["q"]
    assert with_q(q.detach().clone().requires_grad_()) is NotImplemented
    with torch.no_grad():  # requires grad, but no graph is recorded: the eager call runs
        assert with_q(q.detach().requires_grad_()) is not NotImplemented
    assert with_q(q.to("meta")) is NotImplemented
    assert with_q(q.as_subclass(Marked)) is NotImplemented
    mode = CountingMode()
    with mode:
        assert with_q(q) is NotImplemented
        sparse_mla.sparse_decode(q, args["kv_cache"], args["indices"],
                                 topk_length=args["topk_length"], attn_sink=args["attn_sink"])
    assert mode.calls >= 1, "the public call under a dispatch mode went past the mode"


def test_public_calls_fall_back_to_the_operator_when_needed():
    """Through the public API a grad-requiring input still gets the operators' clear error."""
    a = prefill_case(s_q=2, s_kv=7, h_q=4, d_qk=512, topk=4, seed=1)
    q = a["q"].detach().requires_grad_()
    with pytest.raises(NotImplementedError, match="backward is not implemented"):
        sparse_mla.sparse_prefill(q, a["kv"], a["indices"], a["sm_scale"])
