"""Property-based test of the Python API (hypothesis): calls built from valid small cases with one
or more arguments perturbed across the classes of docs/python.md ("What the package rejects and
why") — devices (meta mixed in), dtypes, shapes, strides and views, overlapping or aliasing
outputs, sizes near the limits, index values, d_v. The invariant: the call raises a clear error
(ValueError / TypeError / RuntimeError / NotImplementedError whose message names the operation)
or returns results equal to the float64 reference, with every passed output written — never an
abort, a hang or an untouched output. Bounded (max_examples, deadline) so CI stays fast."""

import math

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import sparse_mla  # noqa: E402
from sparse_mla.reference import sparse_decode_reference, sparse_prefill_reference  # noqa: E402
from support import (DECODE_LSE, DECODE_OUT, PREFILL_OUT, PREFILL_STATS, INT_MAX,  # noqa: E402
                     INT_MIN, assert_close, decode_case, prefill_case, token_records)

SENTINEL = 12345.0  # written into passed outputs; a successful call must overwrite every element
ERRORS = (ValueError, TypeError, RuntimeError, NotImplementedError)
FUZZ = settings(max_examples=200, deadline=5000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.int64,
          torch.uint8, torch.int8, torch.bool]
INDEX_VALUES = [INT_MIN, -123456, -1, 0, 1, 2**20, INT_MAX]


def perturb_tensor(draw, t: torch.Tensor) -> torch.Tensor:
    """One perturbation of an argument: dtype, shape, strides/view, device or values."""
    kind = draw(st.sampled_from(["dtype", "shape", "strided", "meta", "values", "expand",
                                 "empty", "rank"]))
    if kind == "dtype":
        return t.to(draw(st.sampled_from(DTYPES)))
    if kind == "shape" and t.dim() > 0:
        d = draw(st.integers(0, t.dim() - 1))
        grow = draw(st.sampled_from([-1, 1, 127]))
        shape = list(t.shape)
        shape[d] = max(0, shape[d] + grow)
        return torch.zeros(shape, dtype=t.dtype)
    if kind == "strided" and t.dim() > 0:
        big = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype)
        view = big[..., ::2]
        view.copy_(t)
        return view
    if kind == "meta":
        return t.to("meta")
    if kind == "values" and not t.is_floating_point():
        v = t.clone()
        if v.numel():
            flat = v.view(-1) if v.is_contiguous() else v.reshape(-1)
            value = draw(st.sampled_from(INDEX_VALUES))
            if t.dtype in (torch.uint8, torch.int8, torch.bool):  # a byte-wide tensor's range
                value = value % 256 if t.dtype == torch.uint8 else (value % 256) - 128
                value = bool(value) if t.dtype == torch.bool else value
            flat[draw(st.integers(0, flat.numel() - 1))] = value
            v = flat.view(t.shape)
        return v
    if kind == "values":  # finite rescaling (non-finite q or kv values have no reference)
        return t.clone().mul_(draw(st.sampled_from([0.0, -1.0, 4.0])))
    if kind == "expand" and t.dim() > 0 and t.shape[0] > 1:
        return t[:1].expand(t.shape)
    if kind == "empty":
        return t[:0] if t.dim() > 0 else t
    if kind == "rank":
        return t.unsqueeze(0)
    return t


def output_buffer(draw, shape, dtype, inputs):
    """None, a fresh buffer filled with SENTINEL, or one that overlaps itself or an input."""
    kind = draw(st.sampled_from(["none", "fresh", "fresh", "padded", "overlap", "alias",
                                 "wrong_dtype", "meta"]))
    if kind == "none":
        return None
    if kind == "fresh":
        return torch.full(shape, SENTINEL, dtype=dtype)
    if kind == "padded":
        big = torch.full((*shape[:-1], shape[-1] + 8), SENTINEL, dtype=dtype)
        return big[..., :shape[-1]]
    if kind == "overlap":
        n = max(1, shape[-1] // 2)
        strides = [n] * (len(shape) - 1) + [1]
        span = sum((s - 1) * st_ for s, st_ in zip(shape, strides)) + 1
        return torch.full((max(span, 1),), SENTINEL, dtype=dtype).as_strided(shape, strides)
    if kind == "alias":
        source = draw(st.sampled_from([t for t in inputs if t is not None and t.numel()]))
        numel = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        try:
            flat = source.view(-1).view(torch.uint8)
            if flat.numel() >= numel > 0:
                return flat[:numel].view(dtype).view(shape)
        except RuntimeError:  # a view that cannot be reinterpreted as bytes
            pass
        return torch.full(shape, SENTINEL, dtype=dtype)
    if kind == "wrong_dtype":
        return torch.full(shape, 1, dtype=torch.float16)
    return torch.empty(shape, dtype=dtype, device="meta")


def check_error(error: Exception, op: str) -> None:
    text = str(error)
    assert op in text or "must be" in text or "backward" in text, \
        f"{type(error).__name__} does not name the operation: {text}"


def check_written(name: str, given, result) -> None:
    if given is None:
        return
    assert result.data_ptr() == given.data_ptr(), f"{name}: the passed buffer was not returned"
    assert not (given == SENTINEL).any(), f"{name}: elements left untouched"


def any_meta(values) -> bool:
    return any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in values)


def all_meta_checked(values) -> bool:
    """True when a call with a meta argument was accepted; then every tensor must be meta."""
    if not any_meta(values):
        return False
    assert all(v.device.type == "meta" for v in values if isinstance(v, torch.Tensor)), \
        "meta tensors mixed with real ones were accepted"
    return True


@st.composite
def prefill_calls(draw):
    args = prefill_case(s_q=draw(st.integers(1, 3)), s_kv=draw(st.sampled_from([1, 7, 40])),
                        h_q=draw(st.sampled_from([1, 3, 16, 128])),
                        d_qk=draw(st.sampled_from([512, 576])), topk=draw(st.integers(1, 9)),
                        pad=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))
    for name in draw(st.lists(st.sampled_from(["q", "kv", "indices", "attn_sink",
                                               "topk_length"]), max_size=2, unique=True)):
        if args[name] is not None:
            args[name] = perturb_tensor(draw, args[name])
    if draw(st.integers(0, 9)) == 0:
        args["sm_scale"] = draw(st.sampled_from([0.0, -1.0, math.nan, math.inf, 1e-30]))
    d_v = draw(st.sampled_from([512] * 6 + [0, 256, 2**40, -2**40]))
    q = args["q"]
    s_q, h_q = (q.shape[0], q.shape[1]) if q.dim() == 3 else (1, 1)
    inputs = [args[k] for k in ("q", "kv", "indices", "attn_sink", "topk_length")]
    outs = dict(out=output_buffer(draw, (s_q, h_q, 512), torch.bfloat16, inputs),
                max_logits=output_buffer(draw, (s_q, h_q), torch.float32, inputs),
                lse=output_buffer(draw, (s_q, h_q), torch.float32, inputs))
    return args, d_v, outs


@FUZZ
@given(prefill_calls())
def test_fuzz_prefill(call):
    args, d_v, outs = call
    values = list(args.values()) + list(outs.values())
    try:
        got = sparse_mla.sparse_prefill(**args, d_v=d_v, **outs)
    except ERRORS as error:
        check_error(error, "sparse_prefill")
        return
    if all_meta_checked(values):
        return
    assert d_v == 512
    want = sparse_prefill_reference(**args)
    for name, tol, g, w in zip(("out", "max_logits", "lse"),
                               (PREFILL_OUT, PREFILL_STATS, PREFILL_STATS), got, want):
        check_written(name, outs[name], g)
        assert_close(name, g, w, tol)


@st.composite
def decode_calls(draw):
    fmt = draw(st.sampled_from(["v32_fp8", "v4_fp8", "bf16", "v41_fp8", "v41_fp4"]))
    extra = fmt in ("v4_fp8", "v41_fp8") and draw(st.booleans())
    v41 = fmt.startswith("v41")
    # V4.1: each cache's layout (None: the default), the extra cache v41_fp8 or v41_fp4.
    layouts = [None, "page_split", "token_interleaved"]
    kv_layout = draw(st.sampled_from(layouts)) if v41 else None
    extra_fmt = draw(st.sampled_from([None, "v41_fp8", "v41_fp4"])) if v41 and extra else None
    extra_kv_layout = draw(st.sampled_from(layouts)) if v41 and extra else None
    args = decode_case(b=draw(st.integers(1, 2)), s_q=draw(st.integers(1, 2)),
                       h_q=draw(st.sampled_from([1, 4, 16])), topk=draw(st.integers(1, 9)),
                       fmt=fmt, page_block_size=draw(st.sampled_from([1, 2, 5, 64])),
                       extra=extra, extra_topk=draw(st.integers(1, 5)),
                       extra_page_block_size=draw(st.sampled_from([1, 3])),
                       kv_layout=kv_layout, extra_fmt=extra_fmt, extra_kv_layout=extra_kv_layout,
                       pad=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))
    if draw(st.integers(0, 9)) == 0:  # a layout name that is wrong, or one the format lacks
        key = draw(st.sampled_from(["kv_layout", "extra_kv_layout"] if extra else ["kv_layout"]))
        args[key] = draw(st.sampled_from(["page_split", "token_interleaved", "interleaved", ""]))
    names = ["q", "kv_cache", "indices", "topk_length", "attn_sink"]
    if extra:
        names += ["extra_kv_cache", "extra_indices", "extra_topk_length"]
    for name in draw(st.lists(st.sampled_from(names), max_size=2, unique=True)):
        if args.get(name) is not None:
            args[name] = perturb_tensor(draw, args[name])
    view = draw(st.sampled_from(["whole"] * 5 + ["page_slice", "clone", "block_slice"]))
    cache = args["kv_cache"]
    if view == "page_slice" and cache.dim() == 4 and cache.shape[1] > 1:
        args["kv_cache"] = cache[:, : cache.shape[1] // 2]
    elif view == "clone" and cache.device.type != "meta":
        args["kv_cache"] = cache.clone()
    elif view == "block_slice" and cache.dim() == 4 and cache.shape[0] > 1:
        args["kv_cache"] = cache[1:]
    d_v = draw(st.sampled_from([512] * 6 + [0, 2**40]))
    q = args["q"]
    b, s_q, h_q = (q.shape[0], q.shape[1], q.shape[2]) if q.dim() == 4 else (1, 1, 1)
    inputs = [args.get(k) for k in names]
    outs = dict(out=output_buffer(draw, (b, s_q, h_q, 512), torch.bfloat16, inputs),
                lse=output_buffer(draw, (b, s_q, h_q), torch.float32, inputs))
    return args, d_v, outs, draw(st.booleans())


@FUZZ
@given(decode_calls())
def test_fuzz_decode(call):
    args, d_v, outs, with_plan = call
    values = list(args.values()) + list(outs.values())
    try:
        plan = None
        if with_plan:
            kw = {k: v for k, v in args.items() if k not in ("q", "kv_cache", "indices",
                                                              "softmax_scale")}
            plan = sparse_mla.plan_decode(args["q"], args["kv_cache"], args["indices"], **kw,
                                          d_v=d_v)
        got = sparse_mla.sparse_decode(**args, d_v=d_v, plan=plan, **outs)
    except ERRORS as error:
        check_error(error, "_decode")
        return
    if all_meta_checked(values):
        return
    assert d_v == 512
    cache = args["kv_cache"]
    fmt = sparse_mla.kv_cache_format(sparse_mla.infer_kv_cache_format(cache))
    layout = fmt.layout(args.get("kv_layout"))
    if cache.shape[0] > 1 and layout == "page_split":
        # Accepted page_split views have the format's block stride, or are packed copies.
        assert cache.stride(0) in (
            sparse_mla.kv_cache_block_stride(fmt, cache.shape[1], kv_layout=layout),
            cache.shape[1] * cache.shape[3])
    if cache.stride(0) == cache.shape[1] * cache.shape[3] and cache.shape[0] > 1 \
            and layout == "page_split":
        return  # packed copy: read correctly (test_bad_input), the reference reads views only
    want = sparse_decode_reference(**args)
    for name, tol, g, w in zip(("out", "lse"), (DECODE_OUT, DECODE_LSE), got, want):
        check_written(name, outs[name], g)
        assert_close(name, g, w, tol)


@st.composite
def write_calls(draw):
    """write_kv_cache over a cache of random bytes: every format and layout, rows / slots /
    cache perturbed, wrong format or layout names now and then."""
    fmt = draw(st.sampled_from(["v41_fp8", "v41_fp4", "v4_fp8", "v32_fp8", "bf16"]))
    layout = draw(st.sampled_from([None, "page_split", "token_interleaved"])) \
        if fmt.startswith("v41") else None
    d_qk = 576 if fmt == "v32_fp8" else 512
    pbs, num_blocks, n = draw(st.sampled_from([1, 3, 64])), draw(st.integers(1, 3)), \
        draw(st.integers(0, 6))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    cache = sparse_mla.empty_kv_cache(num_blocks, pbs, fmt, d_qk=d_qk, kv_layout=layout)
    storage = cache.as_strided((num_blocks * cache.stride(0),), (1,))
    storage.copy_(torch.randint(0, 256, storage.shape, generator=gen, dtype=torch.uint8))
    rows = (torch.randn(n, d_qk, generator=gen) / 10).to(torch.bfloat16)
    slots = torch.randint(-2, num_blocks * pbs, (n,), generator=gen, dtype=torch.int32)
    args = dict(rows=rows, slot_mapping=slots, cache=cache, kv_format=fmt, kv_layout=layout)
    if draw(st.booleans()):
        args["kv_format"] = None  # inferred from the bytes
    for name in draw(st.lists(st.sampled_from(["rows", "slot_mapping"]), max_size=2,
                              unique=True)):
        args[name] = perturb_tensor(draw, args[name])
    view = draw(st.sampled_from(["whole"] * 4 + ["page_slice", "clone", "meta", "block_slice"]))
    if view == "page_slice" and pbs > 1:
        args["cache"] = cache[:, : pbs // 2]
    elif view == "clone":
        args["cache"] = cache.clone()
    elif view == "meta":
        args["cache"] = cache.to("meta")
    elif view == "block_slice" and num_blocks > 1:
        args["cache"] = cache[1:]
    if draw(st.integers(0, 9)) == 0:
        key = draw(st.sampled_from(["kv_format", "kv_layout"]))
        args[key] = draw(st.sampled_from(["v41_fp4", "v4_fp8", "page_split", "token_interleaved",
                                          "v5", ""]))
    return args, fmt, layout


@FUZZ
@given(write_calls())
def test_fuzz_write_kv_cache(call):
    """The invariant: an error naming write_kv_cache, or every written slot holds the record
    quantize_kv_cache makes of its last row and every other token's record is unchanged."""
    args, fmt, layout = call
    cache = args["cache"]
    # The bytes before the call, in the cache's own strides (records are read in either layout).
    before = None if cache.device.type == "meta" else \
        torch.empty_strided(cache.size(), cache.stride(), dtype=cache.dtype).copy_(cache)
    try:
        result = sparse_mla.write_kv_cache(**args)
    except ERRORS as error:
        check_error(error, "write_kv_cache")
        return
    assert result is cache
    if all_meta_checked(list(args.values())):
        return
    # Accepted: the format the cache was made in, and a layout of it. Bytes cannot tell the two
    # V4.1 layouts apart where both strides agree (e.g. 64-token pages), so the call's layout is
    # the one written.
    own = sparse_mla.kv_cache_format(fmt)
    assert args["kv_format"] in (None, fmt)
    layout = own.layout(args["kv_layout"])
    before = token_records(before, fmt, layout)
    rows, slots = args["rows"], args["slot_mapping"]
    num_slots = cache.shape[0] * cache.shape[1]
    placed = torch.zeros(num_slots, rows.shape[1], dtype=torch.bfloat16)
    written = torch.zeros(num_slots, dtype=torch.bool)
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            placed[slot] = rows[i]
            written[slot] = True
    quantized = sparse_mla.quantize_kv_cache(
        placed.view(cache.shape[0], cache.shape[1], 1, -1), fmt, kv_layout=layout)
    after = token_records(cache, fmt, layout)
    assert torch.equal(after[written], token_records(quantized, fmt, layout)[written])
    assert torch.equal(after[~written], before[~written])
