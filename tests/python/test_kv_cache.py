"""KV-cache layouts (SPEC §4): the C++ codec behind sparse_mla.quantize_kv_cache makes the same
bytes as FlashMLA (golden caches) and as the independent torch quantizer of
sparse_mla.reference; dequantization agrees with the torch decoder; allocation and errors."""

import pytest
import torch

import sparse_mla
from sparse_mla.reference import dequantize_kv_cache_reference, quantize_kv_cache_reference
from support import golden_scalar, golden_tensor


def used_bytes(cache: torch.Tensor, fmt: str) -> torch.Tensor:
    """The bytes a format defines ([num_blocks, n] uint8): block padding, spare rows and the
    padding byte of v4 scale rows left out."""
    raw = cache.view(torch.uint8)
    num_blocks, pbs = raw.shape[0], raw.shape[1]
    rows = raw[:, :, 0, :].contiguous().view(num_blocks, -1)
    if fmt != "v4_fp8":
        return rows
    keep = torch.ones(pbs * 584, dtype=torch.bool)
    keep[pbs * 576 + 7::8] = False
    return rows[:, keep]


@pytest.mark.parametrize("case,part", [("decode_d576", "kv"), ("decode_d512", "kv"),
                                       ("decode_d512", "extra_kv")])
def test_golden_cache_bytes(case, part):
    """quantize_kv_cache makes FlashMLA's quantized cache byte for byte (padding excepted)."""
    fmt = golden_scalar(case, "format")
    rows = golden_tensor(case, f"{part}_bf16")
    expected = golden_tensor(case, f"{part}_cache")
    cache = sparse_mla.empty_kv_cache(rows.shape[0], rows.shape[1], fmt,
                                      block_stride=expected.stride(0))
    sparse_mla.quantize_kv_cache(rows, fmt, out=cache)
    assert torch.equal(used_bytes(cache, fmt), used_bytes(expected, fmt))
    torch_made = quantize_kv_cache_reference(rows, fmt, block_stride=expected.stride(0))
    assert torch.equal(used_bytes(torch_made, fmt), used_bytes(expected, fmt))


@pytest.mark.parametrize("fmt,d_qk", [("v32_fp8", 576), ("v4_fp8", 512), ("bf16", 512),
                                      ("bf16", 576)])
@pytest.mark.parametrize("page_block_size", [1, 2, 61, 64])
def test_codec_matches_torch_quantizer(fmt, d_qk, page_block_size):
    gen = torch.Generator().manual_seed(page_block_size)
    rows = torch.randn(3, page_block_size, 1, d_qk, generator=gen) * torch.tensor(
        [1e-6, 0.1, 30.0])[:, None, None, None]  # tiny, ordinary and large tiles
    rows[0, 0, 0, :64] = 0  # an all-zero tile: scale 1e-4 rounded up
    rows = rows.to(torch.bfloat16)
    cache = sparse_mla.quantize_kv_cache(rows, fmt)
    # Every byte, padding included (both write zeros there).
    stride = cache.stride(0)
    flat = cache.as_strided((3 * stride,), (1,))
    expected = quantize_kv_cache_reference(rows, fmt)
    assert expected.stride(0) == stride
    assert torch.equal(flat, expected.as_strided((3 * stride,), (1,)))

    decoded = sparse_mla.dequantize_kv_cache(cache, dtype=torch.float32)
    assert torch.equal(decoded, dequantize_kv_cache_reference(cache))
    bf16 = sparse_mla.dequantize_kv_cache(cache)
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, decoded.to(torch.bfloat16))
    if fmt == "bf16":
        assert torch.equal(bf16, rows)


def test_v32_decoder_applies_any_fp32_scale():
    """Engines write raw amax/448 scales (not powers of two): applied exactly, in fp32."""
    rows = (torch.randn(2, 4, 1, 576) / 10).to(torch.bfloat16)
    cache = sparse_mla.quantize_kv_cache(rows, "v32_fp8")
    scales = torch.tensor([0.3, 1e-3, 7.123, 2.5e-5])
    cache[:, :, 0, 512:528] = scales.view(torch.uint8).repeat(2, 4, 1)
    decoded = sparse_mla.dequantize_kv_cache(cache, dtype=torch.float32)
    e4m3 = cache[:, :, 0, :512].contiguous().view(torch.float8_e4m3fn).float()
    expected = e4m3.view(2, 4, 4, 128) * scales[:, None]
    assert torch.equal(decoded[:, :, 0, :512], expected.view(2, 4, 512))


def test_empty_kv_cache_layout():
    cache = sparse_mla.empty_kv_cache(3, 64, "v4_fp8")
    assert cache.shape == (3, 64, 1, 584) and cache.dtype == torch.uint8
    assert cache.stride() == (37440, 584, 584, 1)  # ceil(64*584/576)*576
    assert sparse_mla.kv_cache_block_stride("v4_fp8", 256) == 149760
    assert sparse_mla.kv_cache_block_stride("v32_fp8", 61) == 61 * 656
    assert sparse_mla.kv_cache_block_stride("bf16", 2, d_qk=576) == 2 * 1152
    assert sparse_mla.empty_kv_cache(2, 5, "v32_fp8", block_stride=6 * 656).stride(0) == 6 * 656
    with pytest.raises(ValueError, match="v4_fp8 block stride is exactly 37440"):
        sparse_mla.empty_kv_cache(2, 64, "v4_fp8", block_stride=37440 + 576)
    with pytest.raises(ValueError, match="d_qk = None must be 512 or 576"):
        sparse_mla.empty_kv_cache(2, 64, "bf16")


def test_format_inference():
    assert sparse_mla.infer_kv_cache_format(torch.empty(1, 2, 1, 656, dtype=torch.uint8)) == \
        "v32_fp8"
    assert sparse_mla.infer_kv_cache_format(
        torch.empty(1, 2, 1, 584, dtype=torch.float8_e4m3fn)) == "v4_fp8"
    assert sparse_mla.infer_kv_cache_format(torch.empty(1, 2, 1, 1152, dtype=torch.int8)) == "bf16"
    assert sparse_mla.infer_kv_cache_format(torch.empty(1, 2, 1, 512, dtype=torch.bfloat16)) == \
        "bf16"
    with pytest.raises(ValueError, match="bytes_per_token\\) = 600 matches no KV-cache format"):
        sparse_mla.infer_kv_cache_format(torch.empty(1, 2, 1, 600, dtype=torch.uint8))


def test_codec_errors():
    rows = torch.zeros(2, 4, 1, 512, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="kv_format = 'v9' is not a KV-cache format"):
        sparse_mla.quantize_kv_cache(rows, "v9")
    with pytest.raises(ValueError, match="d_qk"):
        sparse_mla.quantize_kv_cache(rows, "v32_fp8")
    # A storage ending after the last block's tokens (no padding after it): the tokens' bytes
    # are written, the padding the storage lacks is not.
    packed = torch.zeros(1 * 4 * 584, dtype=torch.uint8).view(1, 4, 1, 584)
    sparse_mla.quantize_kv_cache(rows[:1], "v4_fp8", out=packed)
    cache = sparse_mla.quantize_kv_cache(rows[:1], "v4_fp8")
    assert torch.equal(packed, cache)
    assert torch.equal(sparse_mla.dequantize_kv_cache(packed), rows[:1])
    with pytest.raises(ValueError, match=r"stride\(1\) = 1000 must equal bytes_per_token"):
        wide = torch.zeros(2, 4, 1, 1000, dtype=torch.uint8)[..., :656]
        sparse_mla.dequantize_kv_cache(wide)
