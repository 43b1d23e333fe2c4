"""The library's codec for DeepSeek V4.1 caches (sparse_mla.quantize_kv_cache /
dequantize_kv_cache) byte for byte against the independent torch quantizer of
sparse_mla.reference, both records and both page layouts, on rows that exercise every rule
(random, NaN, ±inf, huge, tiny and subnormal, zero and -0, rounding ties); and
sparse_mla.write_kv_cache, the per-step cache writer, for every format: written records equal
quantize_kv_cache's, skipped slots and every other byte untouched, the last row of a slot wins."""

import math

import pytest
import torch

import sparse_mla
from sparse_mla.reference import dequantize_kv_cache_reference, quantize_kv_cache_reference

V41 = [("v41_fp8", "page_split"), ("v41_fp8", "token_interleaved"), ("v41_fp4", "page_split"),
       ("v41_fp4", "token_interleaved")]
# (format, layout, d_qk) of every format the writer takes.
ALL_FORMATS = V41 + [("v32_fp8", None, 576), ("v4_fp8", None, 512), ("bf16", None, 512)]


def special_rows(num_blocks: int, pbs: int, seed: int) -> torch.Tensor:
    """[num_blocks, pbs, 1, 512] bf16: random rows at magnitudes 1e-6 .. 30, with tiles (of 16 and
    of 32 values) holding NaN, ±inf, huge, tiny and subnormal values, zeros and -0, and values on
    the rounding midpoints of e2m1 and e4m3."""
    gen = torch.Generator().manual_seed(seed)
    n = num_blocks * pbs
    scale = torch.tensor([1e-6, 0.1, 1.0, 30.0])[torch.randint(0, 4, (n, 1), generator=gen)]
    rows = torch.randn(n, 512, generator=gen) * scale
    specials = [
        [math.nan], [math.inf], [-math.inf], [math.inf, -math.inf], [3e38, -3e38],
        [1e-30, -2e-35], [9.2e-41, -1e-39],  # bf16 subnormals
        [0.0] * 32, [-0.0] * 32,
        # amax 6 (FP4 scale 1) with every e2m1 midpoint; amax 448 (FP8 scale 1) with e4m3 ones.
        [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, 0.125, -2.5],
        [448.0, 1.0625, 1.1875, 2.125, 17.0, 0.0048828125, -3.25, 416.0, 0.001953125],
    ]
    for r in range(n):  # three specials per row, cycling through the list, at random places
        for k in range(3):
            values = specials[(3 * r + k) % len(specials)]
            start = int(torch.randint(0, 512 - len(values) + 1, (), generator=gen))
            rows[r, start:start + len(values)] = torch.tensor(values)
    return rows.to(torch.bfloat16).view(num_blocks, pbs, 1, 512)


def whole_storage(cache: torch.Tensor) -> torch.Tensor:
    """Every byte of every block (padding included) as a flat uint8 tensor."""
    return cache.view(torch.uint8).as_strided((cache.shape[0] * cache.stride(0),), (1,))


def assert_equal_nan(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fmt,layout", V41)
@pytest.mark.parametrize("page_block_size", [1, 2, 61, 64])
def test_codec_matches_reference(fmt, layout, page_block_size):
    rows = special_rows(3, page_block_size, seed=page_block_size)
    cache = sparse_mla.quantize_kv_cache(rows, fmt, kv_layout=layout)
    assert cache.stride(0) == sparse_mla.kv_cache_block_stride(fmt, page_block_size,
                                                               kv_layout=layout)
    expected = quantize_kv_cache_reference(rows, fmt, kv_layout=layout)
    assert torch.equal(whole_storage(cache), whole_storage(expected))

    decoded = sparse_mla.dequantize_kv_cache(cache, kv_layout=layout, dtype=torch.float32)
    assert_equal_nan(decoded, dequantize_kv_cache_reference(cache, fmt, layout))
    bf16 = sparse_mla.dequantize_kv_cache(cache, fmt, kv_layout=layout)
    assert bf16.dtype == torch.bfloat16
    assert_equal_nan(bf16, decoded.to(torch.bfloat16))
    assert torch.isnan(decoded).any() and torch.isfinite(decoded).any()


@pytest.mark.parametrize("fmt", ["v41_fp8", "v41_fp4"])
def test_padded_token_interleaved_stride(fmt):
    """token_interleaved blocks may be padded by whole records; the padding is written as 0."""
    record = sparse_mla.kv_cache_format(fmt).bytes_per_token
    rows = special_rows(4, 5, seed=3)
    cache = sparse_mla.empty_kv_cache(4, 5, fmt, kv_layout="token_interleaved",
                                      block_stride=7 * record)
    whole_storage(cache).fill_(0xA5)
    sparse_mla.quantize_kv_cache(rows, fmt, kv_layout="token_interleaved", out=cache)
    expected = quantize_kv_cache_reference(rows, fmt, block_stride=7 * record,
                                           kv_layout="token_interleaved")
    assert torch.equal(whole_storage(cache), whole_storage(expected))
    assert whole_storage(cache).view(4, 7 * record)[:, 5 * record:].eq(0).all()
    assert_equal_nan(sparse_mla.dequantize_kv_cache(cache, kv_layout="token_interleaved",
                                                    dtype=torch.float32),
                     dequantize_kv_cache_reference(cache, fmt, "token_interleaved"))


def test_layout_is_not_inferred():
    """Bytes per token cannot tell the layouts apart: a cache read in the wrong one decodes to
    other values (which is why every call names the layout)."""
    rows = special_rows(2, 8, seed=4)
    cache = sparse_mla.quantize_kv_cache(rows, "v41_fp8", kv_layout="token_interleaved")
    right = sparse_mla.dequantize_kv_cache(cache, kv_layout="token_interleaved")
    wrong = sparse_mla.dequantize_kv_cache(cache)  # page_split by default
    assert not torch.equal(right.nan_to_num(), wrong.nan_to_num())


# ---- write_kv_cache ----------------------------------------------------------------------------


def token_of_byte(fmt: str, layout, num_blocks: int, pbs: int, stride: int) -> torch.Tensor:
    """[num_blocks * stride] int64: the slot whose record holds each byte of the cache storage,
    -1 for padding (SPEC §4 offsets)."""
    info = sparse_mla.kv_cache_format(fmt)
    layout = info.layout(layout)
    record = info.token_bytes(512)
    b = torch.arange(stride)
    if layout == "token_interleaved":
        t = torch.where(b < pbs * record, b // record, -1)
    else:
        data = {"v4_fp8": 576, "v41_fp8": 512, "v41_fp4": 256}[fmt]
        scale_row = record - data
        t = torch.where(b < pbs * data, b // data,
                        torch.where(b < pbs * record, (b - pbs * data) // scale_row, -1))
    blocks = torch.arange(num_blocks)[:, None]
    return torch.where(t[None, :] >= 0, blocks * pbs + t[None, :], -1).reshape(-1)


@pytest.mark.parametrize("fmt,layout,d_qk", [(f, l, 512) for f, l in V41] + ALL_FORMATS[4:])
@pytest.mark.parametrize("page_block_size", [1, 7, 64])
def test_write_kv_cache(fmt, layout, d_qk, page_block_size):
    num_blocks = 3
    num_slots = num_blocks * page_block_size
    gen = torch.Generator().manual_seed(page_block_size)
    cache = sparse_mla.empty_kv_cache(num_blocks, page_block_size, fmt, d_qk=d_qk,
                                      kv_layout=layout)
    storage = whole_storage(cache)
    storage.copy_(torch.randint(0, 256, storage.shape, generator=gen, dtype=torch.uint8))
    before = storage.clone()

    n = 2 * page_block_size + 3
    rows = special_rows(1, n, seed=page_block_size + 1).view(n, 512)
    if d_qk == 576:
        rows = torch.cat([rows, rows[:, :64]], dim=1)
    slots = torch.randint(0, num_slots, (n,), generator=gen, dtype=torch.int32)
    slots[::5] = -1  # padding tokens: skipped
    slots[1] = -(2**31)
    if n > 4:
        slots[4] = slots[3]  # a slot written twice: the later row wins
    padded_rows = torch.full((n, d_qk + 64), math.nan, dtype=torch.bfloat16)[:, :d_qk]
    padded_rows.copy_(rows)  # a row stride beyond d_qk
    result = sparse_mla.write_kv_cache(padded_rows, slots, cache, fmt, layout)
    assert result is cache

    # What quantize_kv_cache makes of rows placed at their slots (the last row of a slot wins).
    placed = torch.zeros(num_slots, d_qk, dtype=torch.bfloat16)
    written = torch.zeros(num_slots, dtype=torch.bool)
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            placed[slot] = rows[i]
            written[slot] = True
    quantized = sparse_mla.quantize_kv_cache(placed.view(num_blocks, page_block_size, 1, d_qk),
                                             fmt, kv_layout=layout)
    owner = token_of_byte(fmt, layout, num_blocks, page_block_size, cache.stride(0))
    mine = (owner >= 0) & written[owner.clamp(min=0)]
    assert torch.equal(storage[mine], whole_storage(quantized)[mine])
    assert torch.equal(storage[~mine], before[~mine])  # other tokens and padding untouched
    if fmt.startswith("v41"):
        reference = quantize_kv_cache_reference(
            placed.view(num_blocks, page_block_size, 1, d_qk), fmt, kv_layout=layout)
        assert torch.equal(storage[mine], whole_storage(reference)[mine])


def test_write_kv_cache_errors():
    cache = sparse_mla.empty_kv_cache(2, 4, "v41_fp4")
    whole_storage(cache).fill_(7)
    rows = torch.zeros(3, 512, dtype=torch.bfloat16)
    slots = torch.tensor([0, 8, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"write_kv_cache: slot_mapping\[1\] = 8 is out of range "
                                         "for a cache of 8 slots"):
        sparse_mla.write_kv_cache(rows, slots, cache)
    assert whole_storage(cache).eq(7).all()  # checked before anything is written
    with pytest.raises(ValueError, match='write_kv_cache: kv_layout = "paged" is not a KV-cache '
                                         "layout"):
        sparse_mla.write_kv_cache(rows, slots[:1], cache, kv_layout="paged")
    with pytest.raises(ValueError, match='write_kv_cache: kv_format = "v41" is not a KV-cache '
                                         "format"):
        sparse_mla.write_kv_cache(rows, slots[:1], cache, "v41")
    with pytest.raises(ValueError, match="write_kv_cache: .*rows.*bf16"):
        sparse_mla.write_kv_cache(rows.float(), slots, cache)
    with pytest.raises(ValueError, match="write_kv_cache: cache overlaps rows"):
        alias = rows.view(torch.uint8).view(-1)[:288 * 2].view(1, 2, 1, 288)
        sparse_mla.write_kv_cache(rows[:1], slots[:1], alias)
    with pytest.raises(ValueError, match="write_kv_cache: slot_mapping is on meta but cache is on "
                                         "cpu"):
        sparse_mla.write_kv_cache(rows, slots.to("meta"), cache)
    rows_req = torch.zeros(3, 512, requires_grad=True)
    with pytest.raises(NotImplementedError, match="write_kv_cache: backward is not implemented"):
        sparse_mla.write_kv_cache(rows_req.bfloat16(), slots, cache)
