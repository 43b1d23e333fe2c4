// Tests of the KV-cache format traits and the host codec (SPEC §4): scalar conversions, byte
// layouts checked against SPEC's offset tables (written out again here, independent of the traits
// table), quantize/dequantize round trips, the FlashMLA golden caches byte for byte, and every
// validation error of the codec.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/fp8.h"
#include "sparse_mla/sparse_mla.h"
#include "support/cache_formats.h"
#include "support/golden.h"

namespace sparse_mla {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- independent decoders (SPEC §4, not the library's tables) -----------------------------

float spec_e4m3(uint8_t b) {
  const int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return kNaN;
  const float mag =
      e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (b & 0x80) ? -mag : mag;
}

float spec_bf16(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float read_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

uint16_t read_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// e2m1: sign bit 3, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
float spec_e2m1(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = kMagnitudes[code & 7];
  return (code & 8) ? -mag : mag;
}

bool is_v41(KvCacheFormat f) { return f == KvCacheFormat::kV41Fp8 || f == KvCacheFormat::kV41Fp4; }
bool page_split(const KvCacheView& c) {
  return c.layout == KvLayout::kPageSplit ||
         (c.layout == KvLayout::kDefault && c.format != KvCacheFormat::kV32Fp8 &&
          c.format != KvCacheFormat::kBf16);
}

// A V4.1 token's data and scale bytes from SPEC §4's layout table.
struct V41Token {
  const uint8_t* data;
  const uint8_t* scales;
};
V41Token spec_v41_token(const KvCacheView& c, int64_t slot) {
  const uint8_t* block =
      static_cast<const uint8_t*>(c.data) + (slot / c.page_block_size) * c.block_stride_bytes;
  const int64_t t = slot % c.page_block_size, pbs = c.page_block_size;
  const bool fp8 = c.format == KvCacheFormat::kV41Fp8;
  const int64_t data_bytes = fp8 ? 512 : 256, record = fp8 ? 528 : 288, scale_row = fp8 ? 16 : 32;
  if (page_split(c)) return {block + t * data_bytes, block + pbs * data_bytes + t * scale_row};
  return {block + t * record, block + t * record + data_bytes};
}

// Token `slot` of a cache, decoded from SPEC §4's offset tables: code value * scale in fp32.
std::vector<float> spec_decode(const KvCacheView& c, int64_t slot) {
  const uint8_t* block =
      static_cast<const uint8_t*>(c.data) + (slot / c.page_block_size) * c.block_stride_bytes;
  const int64_t t = slot % c.page_block_size;
  std::vector<float> row(c.d_qk);
  if (c.format == KvCacheFormat::kV41Fp8) {
    const V41Token tok = spec_v41_token(c, slot);
    for (int i = 0; i < 512; ++i) {
      row[i] = spec_e4m3(tok.data[i]) * std::ldexp(1.0f, tok.scales[i / 32] - 127);
    }
  } else if (c.format == KvCacheFormat::kV41Fp4) {
    const V41Token tok = spec_v41_token(c, slot);
    for (int i = 0; i < 512; ++i) {
      const uint8_t byte = tok.data[i / 2];
      row[i] = spec_e2m1(i % 2 == 0 ? byte & 0xf : byte >> 4) * spec_e4m3(tok.scales[i / 16]);
    }
  } else if (c.format == KvCacheFormat::kV32Fp8) {
    const uint8_t* r = block + t * 656;
    for (int i = 0; i < 512; ++i) row[i] = spec_e4m3(r[i]) * read_f32(r + 512 + 4 * (i / 128));
    for (int i = 0; i < 64; ++i) row[512 + i] = spec_bf16(read_u16(r + 528 + 2 * i));
  } else if (c.format == KvCacheFormat::kV4Fp8) {
    const uint8_t* r = block + t * 576;
    const uint8_t* s = block + c.page_block_size * 576 + t * 8;
    for (int i = 0; i < 448; ++i) row[i] = spec_e4m3(r[i]) * std::ldexp(1.0f, s[i / 64] - 127);
    for (int i = 0; i < 64; ++i) row[448 + i] = spec_bf16(read_u16(r + 448 + 2 * i));
  } else {
    const uint8_t* r = block + t * 2 * c.d_qk;
    for (int i = 0; i < c.d_qk; ++i) row[i] = spec_bf16(read_u16(r + 2 * i));
  }
  return row;
}

// True for the bytes of a block that SPEC §4 leaves as padding (v32: after the token rows; v4:
// each scale row's 8th byte and the tail after the scale rows; V4.1: after the records, either
// layout).
bool is_padding_byte(KvCacheFormat format, int64_t pbs, int64_t offset_in_block, int d_qk) {
  switch (format) {
    case KvCacheFormat::kV41Fp8:
      return offset_in_block >= pbs * 528;
    case KvCacheFormat::kV41Fp4:
      return offset_in_block >= pbs * 288;
    case KvCacheFormat::kV32Fp8:
      return offset_in_block >= pbs * 656;
    case KvCacheFormat::kV4Fp8:
      if (offset_in_block < pbs * 576) return false;
      if (offset_in_block < pbs * 584) return (offset_in_block - pbs * 576) % 8 == 7;
      return true;
    case KvCacheFormat::kBf16:
      return offset_in_block >= pbs * 2 * d_qk;
  }
  return false;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

// ---- test data -----------------------------------------------------------------------------

struct Cache {
  std::vector<uint8_t> bytes;
  KvCacheView view;
};

Cache make_cache(KvCacheFormat format, int d_qk, int64_t num_blocks, int64_t pbs,
                 int64_t extra_stride = 0, uint8_t fill = 0xcd,
                 KvLayout layout = KvLayout::kDefault) {
  Cache c;
  c.view.format = format;
  c.view.layout = layout;
  c.view.d_qk = d_qk;
  c.view.num_blocks = num_blocks;
  c.view.page_block_size = pbs;
  c.view.block_stride_bytes = kv_cache_min_block_stride(format, pbs, d_qk, layout) + extra_stride;
  c.bytes.assign(num_blocks * c.view.block_stride_bytes, fill);  // garbage that must be replaced
  c.view.data = c.bytes.data();
  return c;
}

// randn/10 + offset as bf16 bits, [num_blocks, pbs, 1, d_qk] contiguous.
std::vector<uint16_t> random_rows(int64_t n_rows, int d_qk, uint64_t seed, float offset = 0.03f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> rows(n_rows * d_qk);
  for (auto& v : rows) v = float_to_bf16(normal(rng) / 10 + offset);
  return rows;
}

using FormatCase = test_support::CacheFormatCase;
constexpr auto& kAllFormats = test_support::kAllCacheFormats;

// ---- traits --------------------------------------------------------------------------------

TEST(KvCacheFormat, NamesParseBackAndUnknownNamesAreRejected) {
  for (auto f : {KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8, KvCacheFormat::kBf16,
                 KvCacheFormat::kV41Fp8, KvCacheFormat::kV41Fp4}) {
    EXPECT_EQ(parse_kv_cache_format(kv_cache_format_name(f)), f);
    EXPECT_EQ(kv_cache_format_info(f).format, f);
  }
  EXPECT_STREQ(kv_cache_format_name(KvCacheFormat::kV41Fp8), "v41_fp8");
  EXPECT_STREQ(kv_cache_format_name(KvCacheFormat::kV41Fp4), "v41_fp4");
  for (KvLayout l : {KvLayout::kDefault, KvLayout::kPageSplit, KvLayout::kTokenInterleaved}) {
    EXPECT_EQ(parse_kv_layout(kv_layout_name(l)), l);
  }
  EXPECT_STREQ(kv_layout_name(KvLayout::kPageSplit), "page_split");
  EXPECT_STREQ(kv_layout_name(KvLayout::kTokenInterleaved), "token_interleaved");
  EXPECT_FALSE(parse_kv_layout("interleaved").has_value());
  EXPECT_STREQ(kv_layout_name(static_cast<KvLayout>(7)), "unknown");
  EXPECT_STREQ(kv_cache_format_name(KvCacheFormat::kV32Fp8), "v32_fp8");
  EXPECT_STREQ(kv_cache_format_name(KvCacheFormat::kV4Fp8), "v4_fp8");
  EXPECT_STREQ(kv_cache_format_name(KvCacheFormat::kBf16), "bf16");
  EXPECT_FALSE(parse_kv_cache_format("fp8").has_value());
  EXPECT_FALSE(parse_kv_cache_format("").has_value());
  EXPECT_STREQ(kv_cache_format_name(static_cast<KvCacheFormat>(42)), "unknown");
  EXPECT_EQ(kv_cache_bytes_per_token(static_cast<KvCacheFormat>(42), 512), 0);
}

TEST(KvCacheFormat, BytesPerTokenAndMinimumBlockStride) {
  EXPECT_EQ(kv_cache_bytes_per_token(KvCacheFormat::kV32Fp8, 576), 656);
  EXPECT_EQ(kv_cache_bytes_per_token(KvCacheFormat::kV4Fp8, 512), 584);
  EXPECT_EQ(kv_cache_bytes_per_token(KvCacheFormat::kBf16, 512), 1024);
  EXPECT_EQ(kv_cache_bytes_per_token(KvCacheFormat::kBf16, 576), 1152);
  for (int64_t pbs : {1, 2, 53, 61, 64, 69, 576}) {
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV32Fp8, pbs, 576), pbs * 656);
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, pbs, 512),
              (pbs * 584 + 575) / 576 * 576);
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kBf16, pbs, 576), pbs * 1152);
  }
  // The golden cases' strides and the example of the codec's error message.
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 61, 512), 35712);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 2, 512), 1728);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 64, 512), 37440);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 1, 512), 1152);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 576, 512), 584 * 576);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 0, 512), 0);
  // V4.1: 528 / 288 B per token in either layout; page_split rounds the block up to 512 / 256,
  // token_interleaved is exactly pbs records.
  EXPECT_EQ(kv_cache_bytes_per_token(KvCacheFormat::kV41Fp8, 512), 528);
  EXPECT_EQ(kv_cache_bytes_per_token(KvCacheFormat::kV41Fp4, 512), 288);
  using enum KvLayout;
  for (int64_t pbs : {1, 2, 53, 61, 64, 69, 256, 576}) {
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp8, pbs, 512, kPageSplit),
              (pbs * 528 + 511) / 512 * 512);
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp8, pbs, 512),
              (pbs * 528 + 511) / 512 * 512);  // the default layout is page_split
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp8, pbs, 512, kTokenInterleaved),
              pbs * 528);
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp4, pbs, 512, kPageSplit),
              (pbs * 288 + 255) / 256 * 256);
    EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp4, pbs, 512, kTokenInterleaved),
              pbs * 288);
  }
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp8, 256, 512), 256 * 528);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp4, 64, 512), 64 * 288);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp8, 1, 512), 1024);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV41Fp4, 1, 512), 512);
  // Layouts a format does not have.
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV32Fp8, 64, 576, kPageSplit), 0);
  EXPECT_EQ(kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, 64, 512, kTokenInterleaved), 0);
  EXPECT_FALSE(kv_cache_layout_supported(KvCacheFormat::kV32Fp8, kPageSplit));
  EXPECT_FALSE(kv_cache_layout_supported(KvCacheFormat::kV4Fp8, kTokenInterleaved));
  EXPECT_FALSE(kv_cache_layout_supported(KvCacheFormat::kV41Fp8, static_cast<KvLayout>(3)));
  for (auto f : {KvCacheFormat::kV41Fp8, KvCacheFormat::kV41Fp4}) {
    EXPECT_TRUE(kv_cache_layout_supported(f, kPageSplit));
    EXPECT_TRUE(kv_cache_layout_supported(f, kTokenInterleaved));
    EXPECT_TRUE(kv_cache_layout_supported(f, kDefault));
    EXPECT_EQ(resolve_kv_layout(f, kDefault), kPageSplit);
  }
  EXPECT_EQ(resolve_kv_layout(KvCacheFormat::kV32Fp8, kDefault), kTokenInterleaved);
  EXPECT_EQ(resolve_kv_layout(KvCacheFormat::kV4Fp8, kDefault), kPageSplit);
}

TEST(KvCacheFormat, TraitsRowsMatchSpecLayouts) {
  const auto& v32 = kv_cache_format_info(KvCacheFormat::kV32Fp8);
  EXPECT_EQ(v32.quantized_dims, v32.tile_size * v32.num_scales);
  EXPECT_EQ(v32.scale_offset_in_row, 512);
  EXPECT_EQ(v32.tail_offset, 528);
  EXPECT_EQ(v32.scale_encoding, ScaleEncoding::kFloat32);
  const auto& v4 = kv_cache_format_info(KvCacheFormat::kV4Fp8);
  EXPECT_EQ(v4.quantized_dims, v4.tile_size * v4.num_scales);
  EXPECT_EQ(v4.data_row_bytes, 576);
  EXPECT_EQ(v4.scale_row_bytes, 8);
  EXPECT_EQ(v4.tail_offset, 448);
  EXPECT_EQ(v4.block_alignment, 576);
  EXPECT_EQ(v4.layout, KvLayout::kPageSplit);
  // The four V4.1 rows: SPEC §4's record and layout tables.
  using enum KvLayout;
  for (KvLayout layout : {kPageSplit, kTokenInterleaved}) {
    SCOPED_TRACE(kv_layout_name(layout));
    const auto& f8 = kv_cache_format_info(KvCacheFormat::kV41Fp8, layout);
    EXPECT_EQ(f8.format, KvCacheFormat::kV41Fp8);
    EXPECT_EQ(f8.layout, layout);
    EXPECT_EQ(f8.d_qk, 512);
    EXPECT_EQ(f8.bytes_per_token, 528);
    EXPECT_EQ(f8.value_encoding, ValueEncoding::kE4m3);
    EXPECT_EQ(f8.quantized_dims, 512);
    EXPECT_EQ(f8.quantized_bytes, 512);
    EXPECT_EQ(f8.tile_size, 32);
    EXPECT_EQ(f8.num_scales, 16);
    EXPECT_EQ(f8.scale_encoding, ScaleEncoding::kUe8m0);
    EXPECT_EQ(f8.scale_bytes, 1);
    EXPECT_EQ(f8.data_row_bytes, layout == kPageSplit ? 512 : 528);
    EXPECT_EQ(f8.block_alignment, layout == kPageSplit ? 512 : 528);
    if (layout == kPageSplit) EXPECT_EQ(f8.scale_row_bytes, 16);
    if (layout == kTokenInterleaved) EXPECT_EQ(f8.scale_offset_in_row, 512);
    const auto& f4 = kv_cache_format_info(KvCacheFormat::kV41Fp4, layout);
    EXPECT_EQ(f4.format, KvCacheFormat::kV41Fp4);
    EXPECT_EQ(f4.layout, layout);
    EXPECT_EQ(f4.bytes_per_token, 288);
    EXPECT_EQ(f4.value_encoding, ValueEncoding::kE2m1);
    EXPECT_EQ(f4.quantized_dims, 512);
    EXPECT_EQ(f4.quantized_bytes, 256);
    EXPECT_EQ(f4.tile_size, 16);
    EXPECT_EQ(f4.num_scales, 32);
    EXPECT_EQ(f4.scale_encoding, ScaleEncoding::kE4m3);
    EXPECT_EQ(f4.scale_bytes, 1);
    EXPECT_EQ(f4.data_row_bytes, layout == kPageSplit ? 256 : 288);
    EXPECT_EQ(f4.block_alignment, layout == kPageSplit ? 256 : 288);
    if (layout == kPageSplit) EXPECT_EQ(f4.scale_row_bytes, 32);
    if (layout == kTokenInterleaved) EXPECT_EQ(f4.scale_offset_in_row, 256);
  }
  // A layout a format lacks is the "unknown" row.
  EXPECT_NE(kv_cache_format_info(KvCacheFormat::kV32Fp8, kPageSplit).format,
            KvCacheFormat::kV32Fp8);
  EXPECT_NE(kv_cache_format_info(KvCacheFormat::kV4Fp8, kTokenInterleaved).format,
            KvCacheFormat::kV4Fp8);
}

// ---- scalar conversions --------------------------------------------------------------------

TEST(Fp8Scalars, AllE4m3CodesDecodeAndRoundTrip) {
  for (int code = 0; code < 256; ++code) {
    const auto b = static_cast<uint8_t>(code);
    const float expected = spec_e4m3(b);
    ASSERT_TRUE(same_bits(e4m3_to_float(b), expected)) << "code " << code;
    if (std::isnan(expected)) continue;
    EXPECT_EQ(float_to_e4m3(expected), b) << "code " << code;
  }
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(Fp8Scalars, E4m3RoundsToNearestEven) {
  // Between each pair of adjacent codes (both signs): the midpoint goes to the even code, a hair
  // below to the lower, a hair above to the upper.
  for (int sign : {0x00, 0x80}) {
    for (int c = 0; c < 0x7e; ++c) {
      const auto lo = static_cast<uint8_t>(sign | c), hi = static_cast<uint8_t>(sign | (c + 1));
      const float a = spec_e4m3(lo), b = spec_e4m3(hi);
      const float mid = (a + b) / 2;  // exact: a and b have few mantissa bits
      EXPECT_EQ(float_to_e4m3(mid), (c % 2 == 0) ? lo : hi)
          << "between codes " << c << ", " << c + 1 << " sign " << sign;
      EXPECT_EQ(float_to_e4m3(std::nextafter(mid, a)), lo);
      EXPECT_EQ(float_to_e4m3(std::nextafter(mid, b)), hi);
    }
  }
  // Half the smallest subnormal ties to zero; just above it rounds up.
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -12)), 0x80);
  EXPECT_EQ(float_to_e4m3(1e-30f), 0x00);
}

TEST(Fp8Scalars, E4m3SaturatesAndMapsNaN) {
  for (float x : {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e6f, 3e38f, kInf}) {
    EXPECT_EQ(float_to_e4m3(x), 0x7e) << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xfe) << -x;
  }
  EXPECT_EQ(float_to_e4m3(kNaN), 0x7f);
  EXPECT_EQ(float_to_e4m3(-kNaN), 0x7f);
}

TEST(Fp8Scalars, Ue8m0IsAPowerOfTwo) {
  for (int b = 1; b < 255; ++b) {
    EXPECT_EQ(ue8m0_to_float(static_cast<uint8_t>(b)), std::ldexp(1.0f, b - 127)) << b;
  }
  EXPECT_EQ(ue8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(ue8m0_to_float(255)));
  EXPECT_EQ(cpu::ue8m0_ceil_inline(1.0f), 127);
  EXPECT_EQ(cpu::ue8m0_ceil_inline(1.5f), 128);
  EXPECT_EQ(cpu::ue8m0_ceil_inline(std::ldexp(1.0f, -13)), 114);
  EXPECT_EQ(cpu::ue8m0_ceil_inline(kNaN), 255);
  EXPECT_EQ(cpu::ue8m0_ceil_inline(kInf), 255);
}

TEST(Fp8Scalars, Bf16ConversionsRoundToNearestEven) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc000), -2.0f);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even (down)
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-1.0f - std::ldexp(1.0f, -8)), 0xbf80);
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(-kNaN))));
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float f = bf16_to_float(b);
    if (!std::isnan(f)) ASSERT_EQ(float_to_bf16(f), b) << bits;
  }
}

TEST(Fp8Scalars, QuantizerScaleIsAPowerOfTwoAtLeastTheFloor) {
  EXPECT_EQ(cpu::quantizer_tile_scale(0.0f), std::ldexp(1.0f, -13));  // 1e-4 -> 2^-13
  EXPECT_EQ(cpu::quantizer_tile_scale(448.0f), 1.0f);
  EXPECT_EQ(cpu::quantizer_tile_scale(449.0f), 2.0f);
  EXPECT_EQ(cpu::quantizer_tile_scale(0.3f), std::ldexp(1.0f, -10));  // 0.3/448 = 6.7e-4
  EXPECT_TRUE(std::isnan(cpu::quantizer_tile_scale(kNaN)));
  EXPECT_TRUE(std::isinf(cpu::quantizer_tile_scale(kInf)));
}

// ---- layouts -------------------------------------------------------------------------------

// Packs distinct per-token patterns with pack_kv_token and checks every byte at SPEC's offsets.
TEST(KvCacheLayout, PackedTokensLandAtSpecOffsets) {
  for (int64_t pbs : {1, 3, 61}) {
    for (const FormatCase& fc : kAllFormats) {
      SCOPED_TRACE(fc.name() + " pbs " + std::to_string(pbs));
      const int64_t num_blocks = 3;
      Cache c = make_cache(fc.format, fc.d_qk, num_blocks, pbs, /*extra_stride=*/0, 0, fc.layout);
      const auto& info = kv_cache_format_info(fc.format, fc.layout);
      const int tail = fc.d_qk - info.quantized_dims;
      for (int64_t slot = 0; slot < c.view.num_slots(); ++slot) {
        std::vector<uint8_t> values(info.quantized_bytes);
        for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(slot * 7 + i);
        std::vector<uint16_t> rope(tail);
        for (int i = 0; i < tail; ++i) rope[i] = static_cast<uint16_t>(0x3c00 + slot * 3 + i);
        std::vector<float> f32_scales(info.num_scales);
        std::vector<uint8_t> byte_scales(info.num_scales);
        for (int i = 0; i < info.num_scales; ++i) {
          f32_scales[i] = 0.001f * static_cast<float>(slot + 1) + static_cast<float>(i);
          byte_scales[i] = static_cast<uint8_t>(100 + slot % 20 + i);
        }
        const void* scales = fc.format == KvCacheFormat::kV32Fp8 ? (const void*)f32_scales.data()
                             : fc.format == KvCacheFormat::kBf16 ? nullptr
                                                                 : (const void*)byte_scales.data();
        ASSERT_TRUE(pack_kv_token(c.view, slot, values.empty() ? nullptr : values.data(), scales,
                                  rope.empty() ? nullptr : rope.data())
                        .ok());
        const uint8_t* block = c.bytes.data() + (slot / pbs) * c.view.block_stride_bytes;
        const int64_t t = slot % pbs;
        if (fc.format == KvCacheFormat::kV32Fp8) {
          const uint8_t* row = block + t * 656;
          ASSERT_EQ(std::memcmp(row, values.data(), 512), 0);
          ASSERT_EQ(std::memcmp(row + 512, f32_scales.data(), 16), 0);
          ASSERT_EQ(std::memcmp(row + 528, rope.data(), 128), 0);
        } else if (fc.format == KvCacheFormat::kV4Fp8) {
          const uint8_t* row = block + t * 576;
          ASSERT_EQ(std::memcmp(row, values.data(), 448), 0);
          ASSERT_EQ(std::memcmp(row + 448, rope.data(), 128), 0);
          const uint8_t* srow = block + pbs * 576 + t * 8;
          ASSERT_EQ(std::memcmp(srow, byte_scales.data(), 7), 0);
          ASSERT_EQ(srow[7], 0);
        } else if (is_v41(fc.format)) {
          const bool fp8 = fc.format == KvCacheFormat::kV41Fp8;
          const int64_t data_bytes = fp8 ? 512 : 256, scale_bytes = fp8 ? 16 : 32;
          const uint8_t* data = fc.layout == KvLayout::kPageSplit
                                    ? block + t * data_bytes
                                    : block + t * (data_bytes + scale_bytes);
          const uint8_t* srow = fc.layout == KvLayout::kPageSplit
                                    ? block + pbs * data_bytes + t * scale_bytes
                                    : data + data_bytes;
          ASSERT_EQ(std::memcmp(data, values.data(), data_bytes), 0);
          ASSERT_EQ(std::memcmp(srow, byte_scales.data(), scale_bytes), 0);
        } else {
          ASSERT_EQ(std::memcmp(block + t * 2 * fc.d_qk, rope.data(), 2 * fc.d_qk), 0);
        }
        // The reader agrees with SPEC's tables.
        std::vector<float> row(fc.d_qk);
        dequantize_kv_token(c.view, slot, row.data());
        const std::vector<float> expected = spec_decode(c.view, slot);
        for (int i = 0; i < fc.d_qk; ++i) {
          ASSERT_TRUE(same_bits(row[i], expected[i])) << " slot " << slot << " dim " << i;
        }
      }
    }
  }
}

// Quantizing into a block stride above the minimum gives the same tokens, zero padding
// everywhere else, and odd v32 strides (unaligned fp32 scales) still decode.
TEST(KvCacheLayout, PaddingIsZeroAndLargerStridesHoldTheSameTokens) {
  const int64_t num_blocks = 4;
  for (int64_t pbs : {1, 2, 53, 64, 69}) {
    for (const FormatCase& fc : kAllFormats) {
      SCOPED_TRACE(fc.name());
      const auto rows = random_rows(num_blocks * pbs, fc.d_qk, 11 + pbs);
      TensorView kv = TensorView::contiguous(const_cast<uint16_t*>(rows.data()), DType::kBFloat16,
                                             {num_blocks, pbs, 1, fc.d_qk});
      const int64_t align = kv_cache_format_info(fc.format, fc.layout).block_alignment;
      Cache tight = make_cache(fc.format, fc.d_qk, num_blocks, pbs, 0, 0xcd, fc.layout);
      Cache wide = make_cache(fc.format, fc.d_qk, num_blocks, pbs, align == 1 ? 3 : 2 * align, 0xcd,
                              fc.layout);
      ASSERT_TRUE(quantize_kv_cache(kv, tight.view).ok());
      ASSERT_TRUE(quantize_kv_cache(kv, wide.view).ok());
      const int64_t used = pbs * kv_cache_bytes_per_token(fc.format, fc.d_qk);
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* t_block = tight.bytes.data() + b * tight.view.block_stride_bytes;
        const uint8_t* w_block = wide.bytes.data() + b * wide.view.block_stride_bytes;
        ASSERT_EQ(std::memcmp(t_block, w_block, used), 0) << "block " << b << " pbs " << pbs;
        for (int64_t o = 0; o < wide.view.block_stride_bytes; ++o) {
          if (is_padding_byte(fc.format, pbs, o, fc.d_qk)) {
            ASSERT_EQ(w_block[o], 0)
                << kv_cache_format_name(fc.format) << " pbs " << pbs << " offset " << o;
          }
        }
      }
      for (int64_t slot = 0; slot < wide.view.num_slots(); ++slot) {
        std::vector<float> row(fc.d_qk);
        dequantize_kv_token(wide.view, slot, row.data());
        const std::vector<float> expected = spec_decode(wide.view, slot);
        for (int i = 0; i < fc.d_qk; ++i) ASSERT_TRUE(same_bits(row[i], expected[i]));
      }
    }
  }
}

// ---- round trips ---------------------------------------------------------------------------

// quantize -> dequantize stays within e4m3's rounding of each value (or of the tile scale for
// subnormals); RoPE and bf16 rows come back bit for bit; scales are the reference quantizer's.
// (v41_fp4 has its own float64 model: v41_codec_test.cpp.)
TEST(KvCacheCodec, RoundTripWithinE4m3Rounding) {
  const int64_t num_blocks = 3, pbs = 61;
  for (const FormatCase& fc : kAllFormats) {
    if (fc.format == KvCacheFormat::kV41Fp4) continue;
    SCOPED_TRACE(fc.name());
    auto rows = random_rows(num_blocks * pbs, fc.d_qk, 5);
    rows[3] = float_to_bf16(0.0f);  // an all-zero tile exercises the 1e-4 floor
    for (int i = 0; i < 128; ++i) rows[fc.d_qk + i] = 0;
    rows[2 * fc.d_qk + 5] = float_to_bf16(300.0f);  // a large value in one tile
    // Padded strides: [num_blocks, pbs, 1, d_qk] with row padding of 8 elements.
    const int64_t row_stride = fc.d_qk + 8;
    std::vector<uint16_t> padded(num_blocks * pbs * row_stride, 0xffff);
    for (int64_t r = 0; r < num_blocks * pbs; ++r) {
      std::memcpy(&padded[r * row_stride], &rows[r * fc.d_qk], 2 * fc.d_qk);
    }
    TensorView kv =
        TensorView::strided(padded.data(), DType::kBFloat16, {num_blocks, pbs, 1, fc.d_qk},
                            {pbs * row_stride, row_stride, row_stride, 1});
    Cache c = make_cache(fc.format, fc.d_qk, num_blocks, pbs, 0, 0xcd, fc.layout);
    ASSERT_TRUE(quantize_kv_cache(kv, c.view).ok());
    std::vector<float> out(num_blocks * pbs * fc.d_qk);
    ASSERT_TRUE(dequantize_kv_cache(c.view, TensorView::contiguous(out.data(), DType::kFloat32,
                                                                   {num_blocks, pbs, 1, fc.d_qk}))
                    .ok());
    std::vector<uint16_t> out_bf16(out.size());
    ASSERT_TRUE(
        dequantize_kv_cache(c.view, TensorView::contiguous(out_bf16.data(), DType::kBFloat16,
                                                           {num_blocks, pbs, 1, fc.d_qk}))
            .ok());
    const auto& info = kv_cache_format_info(fc.format, fc.layout);
    for (int64_t r = 0; r < num_blocks * pbs; ++r) {
      const uint16_t* x = &rows[r * fc.d_qk];
      const float* y = &out[r * fc.d_qk];
      for (int tile = 0; tile < info.num_scales; ++tile) {
        double amax = 0;
        for (int i = 0; i < info.tile_size; ++i) {
          amax = std::max(amax, std::fabs(double(spec_bf16(x[tile * info.tile_size + i]))));
        }
        const double s = std::exp2(std::ceil(std::log2(std::max(amax / 448.0, 1e-4))));
        for (int i = 0; i < info.tile_size; ++i) {
          const int d = tile * info.tile_size + i;
          const double xv = spec_bf16(x[d]);
          const double bound = std::max(std::fabs(xv) / 16, s / 1024);
          ASSERT_LE(std::fabs(y[d] - xv), bound) << "row " << r << " dim " << d;
        }
        const std::vector<float> spec = spec_decode(c.view, r);
        ASSERT_TRUE(same_bits(spec[tile * info.tile_size], y[tile * info.tile_size]));
        // The stored scale is the reference quantizer's power of two.
        const uint8_t* block = c.bytes.data() + (r / pbs) * c.view.block_stride_bytes;
        const float stored = fc.format == KvCacheFormat::kV32Fp8
                                 ? read_f32(block + (r % pbs) * 656 + 512 + 4 * tile)
                             : fc.format == KvCacheFormat::kV4Fp8
                                 ? std::ldexp(1.0f, block[pbs * 576 + (r % pbs) * 8 + tile] - 127)
                                 : std::ldexp(1.0f, spec_v41_token(c.view, r).scales[tile] - 127);
        ASSERT_EQ(stored, static_cast<float>(s)) << "row " << r << " tile " << tile;
      }
      for (int d = info.quantized_dims; d < fc.d_qk; ++d) ASSERT_EQ(y[d], spec_bf16(x[d]));
      for (int d = 0; d < fc.d_qk; ++d) ASSERT_EQ(out_bf16[r * fc.d_qk + d], float_to_bf16(y[d]));
    }
  }
}

// Engines write raw amax/448 fp32 scales: the decoder applies them as given, in fp32.
TEST(KvCacheCodec, NonPowerOfTwoV32ScalesDecodeExactly) {
  Cache c = make_cache(KvCacheFormat::kV32Fp8, 576, 2, 3);
  const float scales[4] = {0.3f / 448.0f, 1.7f / 448.0f, 0.0123f, 3.14159f};
  std::vector<uint8_t> e4m3(512);
  for (int i = 0; i < 512; ++i)
    e4m3[i] = static_cast<uint8_t>((i * 37) % 256 == 0x7f ? 1 : (i * 37) % 256);
  std::vector<uint16_t> rope(64);
  for (int i = 0; i < 64; ++i) rope[i] = float_to_bf16(0.25f * i - 3);
  ASSERT_TRUE(pack_kv_token(c.view, 4, e4m3.data(), scales, rope.data()).ok());
  std::vector<float> row(576);
  dequantize_kv_token(c.view, 4, row.data());
  for (int i = 0; i < 512; ++i) {
    const float expected = spec_e4m3(e4m3[i]) * scales[i / 128];  // fp32 product
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(row[i]));
    } else {
      ASSERT_EQ(row[i], expected) << i;
    }
  }
  for (int i = 0; i < 64; ++i) ASSERT_EQ(row[512 + i], 0.25f * i - 3);
  std::vector<float> all(2 * 3 * 576);
  ASSERT_TRUE(dequantize_kv_cache(
                  c.view, TensorView::contiguous(all.data(), DType::kFloat32, {2, 3, 1, 576}))
                  .ok());
  EXPECT_EQ(std::memcmp(&all[4 * 576], row.data(), sizeof(float) * 576), 0);
}

// Poisoned (NaN) rows quantize deterministically and decode to NaN in every quantized dim of
// the poisoned tile, so a stray read shows.
TEST(KvCacheCodec, NaNRowsQuantizeDeterministicallyAndDecodeToNaN) {
  for (const FormatCase& fc : {kAllFormats[0], kAllFormats[1], kAllFormats[4], kAllFormats[5],
                               kAllFormats[6], kAllFormats[7]}) {
    SCOPED_TRACE(fc.name());
    auto rows = random_rows(4, fc.d_qk, 9);
    for (int i = 0; i < fc.d_qk; ++i) rows[fc.d_qk + i] = float_to_bf16(kNaN);  // row 1 poisoned
    rows[2 * fc.d_qk + 7] = float_to_bf16(kNaN);                                // one NaN value
    TensorView kv =
        TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 2, 1, int64_t{fc.d_qk}});
    Cache a = make_cache(fc.format, fc.d_qk, 2, 2, 0, 0x11, fc.layout);
    Cache b = make_cache(fc.format, fc.d_qk, 2, 2, 0, 0x22, fc.layout);
    ASSERT_TRUE(quantize_kv_cache(kv, a.view).ok());
    ASSERT_TRUE(quantize_kv_cache(kv, b.view).ok());
    EXPECT_EQ(a.bytes, b.bytes);
    std::vector<float> row(fc.d_qk);
    dequantize_kv_token(a.view, 1, row.data());
    for (float v : row) EXPECT_TRUE(std::isnan(v));
    dequantize_kv_token(a.view, 2, row.data());
    const int tile = kv_cache_format_info(fc.format).tile_size;
    for (int i = 0; i < tile; ++i) EXPECT_TRUE(std::isnan(row[i])) << i;
    for (int i = tile; i < fc.d_qk; ++i) EXPECT_FALSE(std::isnan(row[i])) << i;
  }
}

// ---- golden caches (FlashMLA's quantizer) --------------------------------------------------

void expect_golden_cache_matches(const char* case_name, const char* bf16_name,
                                 const char* cache_name) {
  SCOPED_TRACE(std::string(case_name) + "." + cache_name);
  const test_support::GoldenCase g = test_support::load_golden_case(case_name);
  const KvCacheView golden = g.cache(cache_name);
  const test_support::GoldenTensor& kv = g.tensor(bf16_name);
  ASSERT_EQ(kv.shape,
            (std::vector<int64_t>{golden.num_blocks, golden.page_block_size, 1, golden.d_qk}));

  std::vector<uint8_t> ours(golden.num_blocks * golden.block_stride_bytes, 0xcd);
  KvCacheView view = golden;
  view.data = ours.data();
  const Status st = quantize_kv_cache(kv.view(), view);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto* theirs = static_cast<const uint8_t*>(golden.data);
  int64_t compared = 0;
  for (int64_t b = 0; b < golden.num_blocks; ++b) {
    for (int64_t o = 0; o < golden.block_stride_bytes; ++o) {
      if (is_padding_byte(golden.format, golden.page_block_size, o, golden.d_qk)) continue;
      const int64_t at = b * golden.block_stride_bytes + o;
      ASSERT_EQ(ours[at], theirs[at]) << "block " << b << " offset " << o;
      ++compared;
    }
  }
  EXPECT_EQ(compared, golden.num_slots() * kv_cache_bytes_per_token(golden.format, golden.d_qk) -
                          (golden.format == KvCacheFormat::kV4Fp8 ? golden.num_slots() : 0));

  // Dequantizing the golden cache gives FlashMLA's reference values: e4m3 * scale.
  std::vector<float> deq(golden.num_slots() * golden.d_qk);
  ASSERT_TRUE(
      dequantize_kv_cache(golden, TensorView::contiguous(
                                      deq.data(), DType::kFloat32,
                                      {golden.num_blocks, golden.page_block_size, 1, golden.d_qk}))
          .ok());
  for (int64_t slot = 0; slot < golden.num_slots(); ++slot) {
    const std::vector<float> expected = spec_decode(golden, slot);
    for (int i = 0; i < golden.d_qk; ++i) {
      ASSERT_TRUE(same_bits(deq[slot * golden.d_qk + i], expected[i]))
          << "slot " << slot << " dim " << i;
    }
  }
}

TEST(KvCacheCodecGolden, V32CacheMatchesFlashMlaQuantizer) {
  expect_golden_cache_matches("decode_d576", "kv_bf16", "kv_cache");
}

TEST(KvCacheCodecGolden, V4CacheMatchesFlashMlaQuantizer) {
  expect_golden_cache_matches("decode_d512", "kv_bf16", "kv_cache");
}

TEST(KvCacheCodecGolden, V4ExtraCacheMatchesFlashMlaQuantizer) {
  expect_golden_cache_matches("decode_d512", "extra_kv_bf16", "extra_kv_cache");
}

TEST(GoldenLoader, ReadsShapesScalarsAndRejectsUnknownNames) {
  const auto names = test_support::golden_case_names();
  for (const char* expected : {"prefill_d576", "prefill_d512", "decode_d576", "decode_d512"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  const test_support::GoldenCase g = test_support::load_golden_case("decode_d576");
  EXPECT_EQ(g.tensor("q").shape, (std::vector<int64_t>{2, 2, 64, 576}));
  EXPECT_EQ(g.tensor("q").dtype, DType::kBFloat16);
  EXPECT_EQ(g.tensor("q").to_float().size(), 2u * 2 * 64 * 576);
  EXPECT_EQ(g.tensor("indices").as<int32_t>().size(), 2u * 2 * 64);
  EXPECT_FLOAT_EQ(g.scalar("softmax_scale"), 0.030322683585054203);  // manifest.json
  EXPECT_EQ(g.format(), KvCacheFormat::kV32Fp8);
  const KvCacheView c = g.cache();
  EXPECT_EQ(c.num_blocks, 6);
  EXPECT_EQ(c.page_block_size, 61);
  EXPECT_EQ(c.block_stride_bytes, 40672);
  EXPECT_EQ(c.d_qk, 576);
  EXPECT_FALSE(g.has("extra_kv_cache"));
  EXPECT_THROW(g.tensor("nope"), std::runtime_error);
  EXPECT_THROW(g.scalar("nope"), std::runtime_error);
  EXPECT_THROW((void)g.tensor("q").as<float>(), std::runtime_error);
  EXPECT_THROW(test_support::load_golden_case("no_such_case"), std::runtime_error);
  const test_support::GoldenCase p = test_support::load_golden_case("prefill_d512");
  EXPECT_EQ(p.scalar("sm_scale"), 0.5);
  EXPECT_THROW(p.format(), std::runtime_error);
  const TensorView v = p.tensor("kv").view();
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.sizes[0], 160);
  EXPECT_EQ(v.strides[0], 512);
  EXPECT_TRUE(v.is_contiguous());
}

// ---- validation ----------------------------------------------------------------------------

class KvCacheCodecValidation : public ::testing::Test {
 protected:
  // A valid v4 cache of 2 blocks of 64 tokens and matching bf16 rows.
  Cache cache = make_cache(KvCacheFormat::kV4Fp8, 512, 2, 64, 0, 0x5a);
  std::vector<uint16_t> rows = random_rows(2 * 64, 512, 3);
  TensorView kv = TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 64, 1, 512});

  void expect_quantize_error(const KvCacheView& c, const TensorView& t, const std::string& text) {
    const std::vector<uint8_t> before = cache.bytes;
    const Status st = quantize_kv_cache(t, c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(st.message(), HasSubstr(text));
    EXPECT_EQ(cache.bytes, before) << "cache written despite the error: " << text;
  }
};

TEST_F(KvCacheCodecValidation, CacheArguments) {
  KvCacheView c = cache.view;
  c.block_stride_bytes = 37000;
  expect_quantize_error(c, kv,
                        "quantize_kv_cache: cache.block_stride_bytes = 37000 is smaller than the "
                        "minimum 37440 for v4_fp8 with page_block_size 64");
  c = cache.view;
  c.block_stride_bytes = 37440 + 8;
  expect_quantize_error(c, kv, "cache.block_stride_bytes = 37448 is not a multiple of 576");
  c = cache.view;
  c.data = nullptr;
  expect_quantize_error(c, kv, "cache.data is null");
  c = cache.view;
  c.device = Device::cuda(0);
  expect_quantize_error(c, kv, "cache.device = cuda:0");
  c = cache.view;
  c.format = static_cast<KvCacheFormat>(42);
  expect_quantize_error(c, kv, "cache.format = 42 is not a KV-cache format of this build");
  c = cache.view;
  c.d_qk = 576;
  expect_quantize_error(c, kv, "cache.d_qk = 576 does not match format v4_fp8 (needs 512)");
  c = cache.view;
  c.format = KvCacheFormat::kBf16;
  c.d_qk = 300;
  expect_quantize_error(c, kv, "cache.d_qk = 300 does not match format bf16 (needs 512 or 576)");
  c = cache.view;
  c.num_blocks = -1;
  expect_quantize_error(c, kv, "cache.num_blocks = -1 must be >= 0");
  c = cache.view;
  c.page_block_size = 0;
  expect_quantize_error(c, kv, "cache.page_block_size = 0 must be >= 1");
  c = cache.view;
  c.num_blocks = int64_t{1} << 50;
  expect_quantize_error(c, kv, "overflows int64");
  c = cache.view;
  c.page_block_size = int64_t{1} << 62;
  expect_quantize_error(c, kv, "is smaller than the minimum");
}

TEST_F(KvCacheCodecValidation, RowTensorArguments) {
  TensorView t = kv;
  t.data = nullptr;
  expect_quantize_error(cache.view, t, "quantize_kv_cache: kv_bf16.data is null");
  t = kv;
  t.device = Device::cuda(1);
  expect_quantize_error(cache.view, t, "kv_bf16.device = cuda:1");
  t = kv;
  t.dtype = DType::kFloat32;
  expect_quantize_error(cache.view, t, "kv_bf16.dtype = fp32 must be bf16");
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 64, 512});
  expect_quantize_error(cache.view, t, "expected rank 4");
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {1, 64, 1, 512});
  expect_quantize_error(cache.view, t, "kv_bf16.sizes[0] (num_blocks) = 1 does not match");
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 32, 1, 512});
  expect_quantize_error(cache.view, t, "kv_bf16.sizes[1] (page_block_size) = 32");
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {1, 64, 2, 512});
  expect_quantize_error(cache.view, t, "kv_bf16.sizes[0] (num_blocks) = 1");
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 64, 2, 256});
  expect_quantize_error(cache.view, t, "kv_bf16.sizes[2] (h_kv) = 2");
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 64, 1, 256});
  expect_quantize_error(cache.view, t, "kv_bf16.sizes[3] (d_qk) = 256");
  t = TensorView::strided(rows.data(), DType::kBFloat16, {2, 64, 1, 512}, {0, 0, 0, 2});
  expect_quantize_error(cache.view, t, "kv_bf16.strides[3] = 2 must be 1");
  t = TensorView::strided(rows.data(), DType::kBFloat16, {2, 64, 1, 512}, {-512, 512, 512, 1});
  expect_quantize_error(cache.view, t, "kv_bf16.strides[0] = -512 is negative");
  // Offsets past 2^63 bytes would overflow the row loop's int64 arithmetic.
  t = TensorView::strided(rows.data(), DType::kBFloat16, {2, 64, 1, 512},
                          {int64_t{1} << 62, 512, 512, 1});
  expect_quantize_error(cache.view, t,
                        "kv_bf16 ([2, 64, 1, 512] bf16 strides [4611686018427387904, "
                        "512, 512, 1] cpu) spans more than 2^63 bytes");
  t = kv;
  t.data = reinterpret_cast<char*>(rows.data()) + 1;
  expect_quantize_error(cache.view, t, "kv_bf16.data is not aligned to its element size 2");
}

TEST_F(KvCacheCodecValidation, DequantizeArguments) {
  std::vector<float> out(2 * 64 * 512, 7.0f);
  const std::vector<float> before = out;
  Status st = dequantize_kv_cache(
      cache.view, TensorView::contiguous(out.data(), DType::kInt32, {2, 64, 1, 512}));
  EXPECT_THAT(st.message(), HasSubstr("dequantize_kv_cache: kv_out.dtype = int32 must be bf16 or "
                                      "fp32"));
  st = dequantize_kv_cache(cache.view,
                           TensorView::contiguous(out.data(), DType::kFloat32, {2, 64, 1, 448}));
  EXPECT_THAT(st.message(), HasSubstr("kv_out.sizes[3] (d_qk) = 448"));
  KvCacheView c = cache.view;
  c.block_stride_bytes = 100;
  st = dequantize_kv_cache(c, TensorView::contiguous(out.data(), DType::kFloat32, {2, 64, 1, 512}));
  EXPECT_THAT(st.message(), HasSubstr("dequantize_kv_cache: cache.block_stride_bytes = 100"));
  EXPECT_EQ(out, before);
}

TEST_F(KvCacheCodecValidation, PackArguments) {
  std::vector<uint8_t> e4m3(448, 0x38);
  std::vector<uint8_t> scales(7, 127);
  std::vector<uint16_t> rope(512, 0x3f80);
  const std::vector<uint8_t> before = cache.bytes;
  auto msg = [&](const KvCacheView& c, int64_t slot, const uint8_t* e, const void* s,
                 const uint16_t* r) { return pack_kv_token(c, slot, e, s, r).message(); };
  EXPECT_THAT(msg(cache.view, -1, e4m3.data(), scales.data(), rope.data()),
              HasSubstr("pack_kv_token: slot = -1 is out of range [0, 128)"));
  EXPECT_THAT(msg(cache.view, 128, e4m3.data(), scales.data(), rope.data()),
              HasSubstr("slot = 128 is out of range"));
  EXPECT_THAT(msg(cache.view, 0, nullptr, scales.data(), rope.data()),
              HasSubstr("pack_kv_token: e4m3 is null (format v4_fp8)"));
  EXPECT_THAT(msg(cache.view, 0, e4m3.data(), nullptr, rope.data()),
              HasSubstr("pack_kv_token: scales is null"));
  EXPECT_THAT(msg(cache.view, 0, e4m3.data(), scales.data(), nullptr),
              HasSubstr("pack_kv_token: rope is null"));
  KvCacheView c = cache.view;
  c.block_stride_bytes = 37000;
  EXPECT_THAT(msg(c, 0, e4m3.data(), scales.data(), rope.data()),
              HasSubstr("pack_kv_token: cache.block_stride_bytes = 37000"));
  EXPECT_EQ(cache.bytes, before);

  Cache bf16 = make_cache(KvCacheFormat::kBf16, 512, 1, 4);
  EXPECT_THAT(msg(bf16.view, 0, e4m3.data(), nullptr, rope.data()),
              HasSubstr("e4m3 and scales must be null for format bf16"));
  EXPECT_TRUE(pack_kv_token(bf16.view, 3, nullptr, nullptr, rope.data()).ok());
  std::vector<float> row(512);
  dequantize_kv_token(bf16.view, 3, row.data());
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[511], 1.0f);
}

}  // namespace
}  // namespace sparse_mla
