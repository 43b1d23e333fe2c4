"""DeepSeek V4.1 records (SPEC §4) in sparse_mla.reference: the torch quantizer against bytes
computed by hand from the rules (FP8 32-value tiles with a ue8m0 ceil-power-of-two scale; FP4
16-value tiles with scale e4m3(clamp(amax/6, 2^-9, 448)), e2m1 round-to-nearest-even and
saturated, NaN tile -> NaN scale, NaN code -> 0, even index in the low nibble), both page layouts,
and the decoder; block strides and allocation of both layouts."""

import math

import pytest
import torch

import sparse_mla
from sparse_mla.reference import dequantize_kv_cache_reference, quantize_kv_cache_reference

LAYOUTS = ["page_split", "token_interleaved"]


def one_token(values) -> torch.Tensor:
    """[1, 1, 1, 512] bf16 from a list of up to 512 values (the rest 0)."""
    row = torch.zeros(512)
    row[: len(values)] = torch.tensor(values, dtype=torch.float32)
    return row.to(torch.bfloat16).view(1, 1, 1, 512)


def token_parts(cache: torch.Tensor, fmt: str, layout: str, t: int = 0):
    """(data bytes, scale bytes) of token t in block 0, read by the SPEC §4 offsets."""
    data_bytes, scale_bytes = (512, 16) if fmt == "v41_fp8" else (256, 32)
    record = data_bytes + scale_bytes
    pbs = cache.shape[1]
    flat = cache.view(torch.uint8).as_strided((cache.stride(0),), (1,))
    if layout == "page_split":
        data = flat[t * data_bytes:(t + 1) * data_bytes]
        scales = flat[pbs * data_bytes + t * scale_bytes:][:scale_bytes]
    else:
        data = flat[t * record:][:data_bytes]
        scales = flat[t * record + data_bytes:][:scale_bytes]
    return data, scales


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fp8_hand_computed_bytes(layout):
    values = [1.0] * 32          # tile 0: amax 1 -> 1/448 -> 2^-8 (ue8m0 119); 1/2^-8 = 256: 0x78
    values += [0.0] * 32         # tile 1: all zero -> 1e-4 -> 2^-13 (ue8m0 114); codes 0
    values += [math.nan] + [1.0] * 31    # tile 2: NaN -> scale 0xff, every code 0x7f
    values += [math.inf, -1.0] + [0.5] * 30  # tile 3: inf -> scale 0xff; 1/inf = 0, inf/inf NaN
    values += [448.0, -3.0, 1.25] + [0.0] * 29  # tile 4: 448/448 = 1 -> 2^0 (127); e4m3 codes
    data, scales = token_parts(
        quantize_kv_cache_reference(one_token(values), "v41_fp8", kv_layout=layout),
        "v41_fp8", layout)
    assert scales[:5].tolist() == [119, 114, 0xFF, 0xFF, 127]
    assert scales[5:].tolist() == [114] * 11  # zero tiles
    assert data[:32].tolist() == [0x78] * 32
    assert data[32:64].tolist() == [0] * 32
    assert data[64:96].tolist() == [0x7F] * 32
    assert data[96:99].tolist() == [0x7F, 0x80, 0x00]  # inf/inf NaN, -1/inf = -0, 0.5/inf = 0
    # 448 = 1.75 * 2^8 -> 0x7e; -3 = -1.5 * 2^1 -> 0x80 | (8 << 3) | 4 = 0xc4; 1.25 -> 0x3a.
    assert data[128:131].tolist() == [0x7E, 0xC4, 0x3A]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fp4_hand_computed_bytes(layout):
    # Tile 0 (amax 6 -> scale e4m3(1.0) = 0x38): each value is its own code value, and the
    # midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5 round to the even code 0 2 2 4 4 6 6.
    tile0 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -6.0]
    codes0 = [0, 1, 2, 3, 4, 5, 6, 7, 0, 2, 2, 4, 4, 6, 6, 15]
    # Tile 1: amax 12 -> scale 2 (0x40): -0.5 / 2 = -0.25 -> -0 (code 8), 12/2 = 6, 7/2 = 3.5
    # -> 4 (6), -1/2 = -0.5 (9), 0.6/2 = 0.3 -> 0.5 (1).
    tile1 = [-0.5, 12.0, 7.0, -1.0, 0.6] + [0.0] * 11
    codes1 = [8, 7, 6, 9, 1] + [0] * 11
    tile2 = [1e-30] * 16              # tiny: amax/6 < 2^-9 -> scale 2^-9 (0x01), codes 0
    tile3 = [math.nan] + [1.0] * 15   # NaN tile: scale NaN (0x7f), NaN codes stored as 0
    tile4 = [math.inf, -math.inf, 224.0] + [0.0] * 13  # inf: scale 448 (0x7e); ±inf -> ±6; 0.5
    tile5 = [3e38, -1.0] + [0.0] * 14  # huge: scale 448; 3e38/448 saturates to 6; -1/448 -> -0
    tile6 = [0.3] * 16  # bf16 0.30078125: amax/6 -> e4m3 0.05078125 (0x15); x/s = 5.92 -> code 7
    data, scales = token_parts(
        quantize_kv_cache_reference(
            one_token(tile0 + tile1 + tile2 + tile3 + tile4 + tile5 + tile6), "v41_fp4",
            kv_layout=layout),
        "v41_fp4", layout)
    assert scales[:7].tolist() == [0x38, 0x40, 0x01, 0x7F, 0x7E, 0x7E, 0x15]
    assert scales[7:].tolist() == [0x01] * 25  # zero tiles: clamp to 2^-9
    codes = [c for byte in data.tolist() for c in (byte & 0xF, byte >> 4)]
    assert codes[:16] == codes0 and codes[16:32] == codes1
    assert codes[32:48] == [0] * 16 and codes[48:64] == [0] * 16
    assert codes[64:67] == [7, 15, 1]
    assert codes[80:82] == [7, 8]
    assert codes[96:112] == [7] * 16
    assert data[0].item() == codes0[0] | (codes0[1] << 4)  # even index in the low nibble


@pytest.mark.parametrize("fmt", ["v41_fp8", "v41_fp4"])
def test_layouts_hold_the_same_records(fmt):
    """The two layouts are two arrangements of the same token records; the decoder reads each
    back, and values the record stores exactly come back exactly."""
    gen = torch.Generator().manual_seed(1)
    rows = (torch.randn(3, 5, 1, 512, generator=gen) / 10).to(torch.bfloat16)
    split = quantize_kv_cache_reference(rows, fmt, kv_layout="page_split")
    inter = quantize_kv_cache_reference(rows, fmt, kv_layout="token_interleaved")
    for t in range(5):
        for a, b in zip(token_parts(split[1:2], fmt, "page_split", t),
                        token_parts(inter[1:2], fmt, "token_interleaved", t)):
            assert torch.equal(a, b)
    decoded = dequantize_kv_cache_reference(split, fmt, "page_split")
    assert torch.equal(decoded, dequantize_kv_cache_reference(inter, fmt, "token_interleaved"))
    # Quantization error within a code step: e4m3 keeps 3 mantissa bits, e2m1 steps by up to 2
    # scales of amax / 6 (|x| <= ~0.5 here).
    err = (decoded - rows.float()).abs().max().item()
    assert 0 < err < (0.03 if fmt == "v41_fp8" else 0.1)


def test_fp4_decoder_values():
    """Every e2m1 code times an e4m3 scale, exactly."""
    cache = sparse_mla.empty_kv_cache(1, 1, "v41_fp4", kv_layout="token_interleaved")
    cache[0, 0, 0, :8] = torch.tensor([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE],
                                      dtype=torch.uint8)
    cache[0, 0, 0, 256] = 0x40  # scale 2 for values 0..15
    cache[0, 0, 0, 257] = 0x7F  # NaN scale: values 16..31 NaN
    decoded = dequantize_kv_cache_reference(cache, "v41_fp4", "token_interleaved")[0, 0, 0]
    magnitudes = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert decoded[:16].tolist() == [2 * m for m in magnitudes] + [-2 * m for m in magnitudes]
    assert torch.isnan(decoded[16:32]).all()
    assert decoded[32:].eq(0).all()  # zero bytes and zero scales


def test_block_strides_and_allocation():
    stride = sparse_mla.kv_cache_block_stride
    assert stride("v41_fp8", 64) == 64 * 528  # 33792 = 66 * 512
    assert stride("v41_fp8", 61) == 32256  # 61 * 528 = 32208 rounded up to 512
    assert stride("v41_fp4", 61) == 17664  # 61 * 288 = 17568 rounded up to 256
    assert stride("v41_fp8", 61, kv_layout="token_interleaved") == 61 * 528
    assert stride("v41_fp4", 3, kv_layout="token_interleaved") == 3 * 288
    cache = sparse_mla.empty_kv_cache(2, 61, "v41_fp4")
    assert cache.shape == (2, 61, 1, 288) and cache.stride() == (17664, 288, 288, 1)
    padded = sparse_mla.empty_kv_cache(2, 5, "v41_fp8", kv_layout="token_interleaved",
                                       block_stride=7 * 528)
    assert padded.stride(0) == 7 * 528
    with pytest.raises(ValueError, match="a v41_fp8 page_split block stride is exactly 32256"):
        sparse_mla.empty_kv_cache(2, 61, "v41_fp8", block_stride=32256 + 512)
    with pytest.raises(ValueError, match="must be >= 2640 and a multiple of 528 for v41_fp8 "
                                         "token_interleaved"):
        sparse_mla.empty_kv_cache(2, 5, "v41_fp8", kv_layout="token_interleaved",
                                  block_stride=2640 + 512)
    with pytest.raises(ValueError, match="kv_layout = 'interleaved' is not a KV-cache layout "
                                         r"\(page_split, token_interleaved\)"):
        sparse_mla.empty_kv_cache(2, 5, "v41_fp8", kv_layout="interleaved")
    with pytest.raises(ValueError, match="kv_layout = 'token_interleaved' is not a layout of "
                                         r"v4_fp8 \(its layout is page_split\)"):
        sparse_mla.kv_cache_block_stride("v4_fp8", 64, kv_layout="token_interleaved")
    with pytest.raises(ValueError, match="kv_layout = 'page_split' is not a layout of v32_fp8"):
        sparse_mla.empty_kv_cache(2, 5, "v32_fp8", kv_layout="page_split")
    assert sparse_mla.kv_cache_format("v41_fp4").layouts == ("page_split", "token_interleaved")
    # "default" names the format's own layout, as in the C++ API.
    assert sparse_mla.kv_cache_format("v32_fp8").layout("default") == "token_interleaved"
    assert sparse_mla.kv_cache_block_stride("v41_fp8", 61, kv_layout="default") == 32256


def test_format_inference():
    infer = sparse_mla.infer_kv_cache_format
    assert infer(torch.empty(1, 2, 1, 528, dtype=torch.uint8)) == "v41_fp8"
    assert infer(torch.empty(1, 2, 1, 288, dtype=torch.float8_e4m3fn)) == "v41_fp4"
