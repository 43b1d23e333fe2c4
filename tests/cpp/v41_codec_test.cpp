// The DeepSeek V4.1 records on the host (SPEC §4): one token of each record in each page layout
// against bytes derived by hand from the quantizer rules, e2m1 at every code and midpoint, the FP4
// scale rules, quantize -> dequantize against a float64 model of the quantizers, and the cache
// writer (write_kv_cache) against quantize_kv_cache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/fp8.h"
#include "sparse_mla/sparse_mla.h"
#include "support/cache_formats.h"

namespace sparse_mla {
namespace {

using ::testing::HasSubstr;
using enum KvLayout;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr uint16_t kBf16NaN = 0x7fc0;

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

struct Cache {
  std::vector<uint8_t> bytes;
  KvCacheView view;
};

Cache make_cache(KvCacheFormat format, KvLayout layout, int64_t num_blocks, int64_t pbs,
                 uint8_t fill = 0xcd, int64_t extra_stride = 0) {
  Cache c;
  c.view.format = format;
  c.view.layout = layout;
  c.view.d_qk = 512;
  c.view.num_blocks = num_blocks;
  c.view.page_block_size = pbs;
  c.view.block_stride_bytes = kv_cache_min_block_stride(format, pbs, 512, layout) + extra_stride;
  c.bytes.assign(num_blocks * c.view.block_stride_bytes, fill);
  c.view.data = c.bytes.data();
  return c;
}

TensorView rows_view(std::vector<uint16_t>& rows, int64_t num_blocks, int64_t pbs) {
  return TensorView::contiguous(rows.data(), DType::kBFloat16, {num_blocks, pbs, 1, 512});
}

// ---- one token, bytes derived by hand ------------------------------------------------------

// The row both hand-computed tokens below quantize (bf16 bits, 512 values, zero unless set).
std::vector<uint16_t> hand_row(bool fp4) {
  std::vector<uint16_t> x(512, 0);
  auto set = [&](int i, float v) { x[i] = float_to_bf16(v); };
  if (!fp4) {
    set(0, 1.0f);
    set(1, -2.0f);
    set(2, 0.3f);  // bf16 0.30078125
    set(64, 1000.0f);
    set(65, -0.001f);  // bf16 -0.00099945068359375
    set(500, 1.0f);
    x[497] = kBf16NaN;  // tile 15 (dims 480-511) holds a NaN
  } else {
    const float tile0[] = {3.0f,   -1.0f, 0.25f, 0.375f, 0.125f, -0.625f,
                           0.875f, 1.25f, 1.75f, 2.5f,   -2.75f, -0.0f};
    for (int i = 0; i < 12; ++i) set(i, tile0[i]);
    set(32, 4096.0f);  // tile 2: amax / 6 > 448
    set(33, -2048.0f);
    set(34, 448.0f);
    set(48, 0.001f);  // tile 3: amax / 6 < 2^-9; bf16 0.00099945068359375
    set(64, 1.0f);    // tile 4: scale e4m3(1/6) = 0.171875
    set(65, -0.5f);
    set(80, kInf);  // tile 5: an infinite value
    set(81, 1.0f);
    set(497, 1.0f);
    x[500] = kBf16NaN;  // tile 31 (dims 496-511) holds a NaN
  }
  return x;
}

// v41_fp8 (tiles of 32, scale = 2^ceil(log2(max(amax / 448, 1e-4)))):
//   tile 0: amax 2 -> 2/448 = 0.00446 -> 2^-7, ue8m0 127-7 = 0x78; 1*128 = 128 = 2^7 -> 0x70;
//           -2*128 = -256 = -2^8 -> 0xf8; 0.30078125*128 = 38.5 -> 40 (1.25 * 2^5) -> 0x62
//   tile 1 and the other zero tiles: 1e-4 -> 2^-13, ue8m0 0x72, codes 0
//   tile 2: amax 1000 -> 1000/448 = 2.23 -> 4, ue8m0 0x81; 1000/4 = 250 -> 256 -> 0x78;
//           -0.00099945/4 = -0.00025 (< half of 2^-9) -> -0, 0x80
//   tile 15: NaN -> scale 0xff, every code 0x7f
std::array<uint8_t, 528> expected_fp8_record() {
  std::array<uint8_t, 528> r{};  // [512 data | 16 scales]
  r[0] = 0x70;
  r[1] = 0xf8;
  r[2] = 0x62;
  r[64] = 0x78;
  r[65] = 0x80;
  for (int i = 480; i < 512; ++i) r[i] = 0x7f;
  for (int t = 0; t < 16; ++t) r[512 + t] = 0x72;
  r[512 + 0] = 0x78;
  r[512 + 2] = 0x81;
  r[512 + 15] = 0xff;
  return r;
}

// v41_fp4 (tiles of 16, scale = e4m3(clamp(amax/6, 2^-9, 448)), code = e2m1(x / scale)):
//   tile 0: amax 3 -> 0.5, e4m3 0x30. x/0.5 = 6, -2, 0.5, 0.75 (tie -> 1.0), 0.25 (tie -> 0),
//           -1.25 (tie -> -1.0), 1.75 (tie -> 2), 2.5 (tie -> 2), 3.5 (tie -> 4), 5 (tie -> 4),
//           -5.5 (-> -6), -0 -> codes 7, c, 1, 2, 0, a, 4, 4, 6, 6, f, 8 -> bytes (low nibble
//           first) c7 21 a0 44 66 8f 00 00
//   tile 1 and the other zero tiles: clamp(0) = 2^-9, e4m3 0x01, codes 0
//   tile 2: amax 4096 -> 682.7 -> 448, 0x7e; 4096/448 = 9.1 -> 6 (saturated) 7; -2048/448 = -4.57
//           -> -4 e; 448/448 = 1 -> 2 -> bytes e7 02
//   tile 3: amax 0.00099945 -> 1.7e-4 -> 2^-9, 0x01; 0.00099945 / 2^-9 = 0.51 -> 0.5, 1 -> 01
//   tile 4: amax 1 -> 1/6 = 0.1667 -> 0.171875 (1.375 * 2^-3), 0x23; 1/0.171875 = 5.8 -> 6 (7);
//           -0.5/0.171875 = -2.9 -> -3 (d) -> byte d7
//   tile 5: amax inf -> 448, 0x7e; inf/448 -> 6 (7); 1/448 -> 0 -> byte 07
//   tile 31: NaN -> scale 0x7f, every code 0
std::array<uint8_t, 288> expected_fp4_record() {
  std::array<uint8_t, 288> r{};  // [256 data | 32 scales]
  const uint8_t tile0[] = {0xc7, 0x21, 0xa0, 0x44, 0x66, 0x8f, 0x00, 0x00};
  for (int i = 0; i < 8; ++i) r[i] = tile0[i];
  r[16] = 0xe7;
  r[17] = 0x02;
  r[24] = 0x01;
  r[32] = 0xd7;
  r[40] = 0x07;
  for (int t = 0; t < 32; ++t) r[256 + t] = 0x01;
  r[256 + 0] = 0x30;
  r[256 + 2] = 0x7e;
  r[256 + 3] = 0x01;
  r[256 + 4] = 0x23;
  r[256 + 5] = 0x7e;
  r[256 + 31] = 0x7f;
  return r;
}

// Slot 4 of a cache of 2 blocks of 3 tokens (block 1, token 1), at SPEC §4's offsets:
//   v41_fp8 page_split        stride ceil(3*528/512)*512 = 2048; data 2048 + 512, scales
//                             2048 + 3*512 + 16 = 3600
//   v41_fp8 token_interleaved stride 3*528 = 1584; record 1584 + 528 = 2112, scales 2624
//   v41_fp4 page_split        stride ceil(3*288/256)*256 = 1024; data 1024 + 256, scales
//                             1024 + 3*256 + 32 = 1824
//   v41_fp4 token_interleaved stride 3*288 = 864; record 864 + 288 = 1152, scales 1408
struct HandCase {
  KvCacheFormat format;
  KvLayout layout;
  int64_t stride, data_offset, scale_offset;
};
constexpr HandCase kHandCases[] = {
    {KvCacheFormat::kV41Fp8, kPageSplit, 2048, 2560, 3600},
    {KvCacheFormat::kV41Fp8, kTokenInterleaved, 1584, 2112, 2624},
    {KvCacheFormat::kV41Fp4, kPageSplit, 1024, 1280, 1824},
    {KvCacheFormat::kV41Fp4, kTokenInterleaved, 864, 1152, 1408},
};

TEST(V41Codec, OneTokenMatchesHandComputedBytesInBothLayouts) {
  for (const HandCase& hc : kHandCases) {
    const bool fp4 = hc.format == KvCacheFormat::kV41Fp4;
    SCOPED_TRACE(std::string(kv_cache_format_name(hc.format)) + " " + kv_layout_name(hc.layout));
    Cache c = make_cache(hc.format, hc.layout, 2, 3);
    ASSERT_EQ(c.view.block_stride_bytes, hc.stride);
    std::vector<uint16_t> rows(6 * 512, 0);
    const std::vector<uint16_t> x = hand_row(fp4);
    std::copy(x.begin(), x.end(), rows.begin() + 4 * 512);
    ASSERT_TRUE(quantize_kv_cache(rows_view(rows, 2, 3), c.view).ok());
    const int data_bytes = fp4 ? 256 : 512, scale_bytes = fp4 ? 32 : 16;
    std::vector<uint8_t> expected(data_bytes + scale_bytes);
    if (fp4) {
      const auto r = expected_fp4_record();
      expected.assign(r.begin(), r.end());
    } else {
      const auto r = expected_fp8_record();
      expected.assign(r.begin(), r.end());
    }
    for (int i = 0; i < data_bytes; ++i) {
      ASSERT_EQ(c.bytes[hc.data_offset + i], expected[i]) << "data byte " << i;
    }
    for (int i = 0; i < scale_bytes; ++i) {
      ASSERT_EQ(c.bytes[hc.scale_offset + i], expected[data_bytes + i]) << "scale " << i;
    }
    // The cache writer stores the same record (and nothing else) into a fresh cache.
    Cache w = make_cache(hc.format, hc.layout, 2, 3, 0xcd);
    int32_t slot = 4;
    const Status s = write_kv_cache(
        TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBFloat16, {1, 512}),
        TensorView::contiguous(&slot, DType::kInt32, {1}), w.view);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t o = 0; o < static_cast<int64_t>(w.bytes.size()); ++o) {
      const bool data = o >= hc.data_offset && o < hc.data_offset + data_bytes;
      const bool scale = o >= hc.scale_offset && o < hc.scale_offset + scale_bytes;
      const uint8_t want = data    ? expected[o - hc.data_offset]
                           : scale ? expected[data_bytes + o - hc.scale_offset]
                                   : uint8_t{0xcd};
      ASSERT_EQ(w.bytes[o], want) << "offset " << o;
    }
    // Decoding: the NaN tile reads NaN, the others code value * scale.
    std::vector<float> row(512);
    dequantize_kv_token(c.view, 4, row.data());
    if (fp4) {
      EXPECT_EQ(row[0], 3.0f);
      EXPECT_EQ(row[1], -1.0f);
      EXPECT_EQ(row[3], 0.5f);                                // 0.375 stored as 1.0 * 0.5
      EXPECT_EQ(row[9], 2.0f);                                // 2.5 stored as 4 * 0.5
      EXPECT_TRUE(std::signbit(row[11]) && row[11] == 0.0f);  // -0 kept
      EXPECT_EQ(row[32], 2688.0f);                            // 6 * 448
      EXPECT_EQ(row[33], -1792.0f);
      EXPECT_EQ(row[48], 0x1p-10f);  // 0.5 * 2^-9
      EXPECT_EQ(row[64], 6 * 0.171875f);
      EXPECT_EQ(row[80], 2688.0f);
      for (int i = 496; i < 512; ++i) EXPECT_TRUE(std::isnan(row[i])) << i;
      for (int i = 0; i < 496; ++i) EXPECT_FALSE(std::isnan(row[i])) << i;
    } else {
      EXPECT_EQ(row[0], 1.0f);
      EXPECT_EQ(row[1], -2.0f);
      EXPECT_EQ(row[2], 0.3125f);
      EXPECT_EQ(row[64], 1024.0f);
      EXPECT_TRUE(std::signbit(row[65]) && row[65] == 0.0f);
      for (int i = 480; i < 512; ++i) EXPECT_TRUE(std::isnan(row[i])) << i;
      for (int i = 0; i < 480; ++i) EXPECT_FALSE(std::isnan(row[i])) << i;
    }
  }
}

// ---- e2m1 ----------------------------------------------------------------------------------

TEST(E2m1, EveryCodeDecodesAndRoundTrips) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int code = 0; code < 16; ++code) {
    const float expected = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    const float got = e2m1_to_float(static_cast<uint8_t>(code));
    ASSERT_TRUE(std::memcmp(&got, &expected, 4) == 0) << "code " << code << ": " << got;
    EXPECT_EQ(float_to_e2m1(expected), code) << "code " << code;
    EXPECT_EQ(cpu::kE2m1ToFloat[code], got);
  }
  EXPECT_TRUE(std::signbit(e2m1_to_float(0x8)));
  EXPECT_EQ(e2m1_to_float(0xf7), 6.0f);  // only the low nibble is read
}

TEST(E2m1, MidpointsTieToEvenAndLargeValuesSaturate) {
  // (x, code): every midpoint goes to the neighbour with bit 0 clear; just off a midpoint goes to
  // the nearer neighbour.
  const std::pair<float, int> ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4},
                                        {2.5f, 4},  {3.5f, 6},  {5.0f, 6}};
  const float below[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f};  // neighbours of each tie
  const float above[] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i < 7; ++i) {
    const auto [x, code] = ties[i];
    SCOPED_TRACE(x);
    EXPECT_EQ(float_to_e2m1(x), code);
    EXPECT_EQ(float_to_e2m1(-x), code | 8);
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(std::nextafter(x, 0.0f))), below[i]);
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(std::nextafter(x, kInf))), above[i]);
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(-std::nextafter(x, kInf))), -above[i]);
  }
  for (float big : {6.0f, 6.5f, 7.0f, 448.0f, 1e30f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(float_to_e2m1(big), 7) << big;
    EXPECT_EQ(float_to_e2m1(-big), 0xf) << big;
  }
  EXPECT_EQ(float_to_e2m1(kNaN), 0);
  EXPECT_EQ(float_to_e2m1(-kNaN), 0);
  EXPECT_EQ(float_to_e2m1(0.0f), 0);
  EXPECT_EQ(float_to_e2m1(-0.0f), 8);
  EXPECT_EQ(float_to_e2m1(-1e-30f), 8);  // rounds to -0
  EXPECT_EQ(float_to_e2m1(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(float_to_e2m1(0.2f), 0);
  EXPECT_EQ(float_to_e2m1(0.3f), 1);
}

// ---- FP4 scale rules -----------------------------------------------------------------------

TEST(Fp4Scale, ClampsAtBothEndsRoundsToE4m3AndCarriesNaN) {
  EXPECT_EQ(cpu::fp4_tile_scale_byte(0.0f, false), 0x01);    // clamp to 2^-9
  EXPECT_EQ(cpu::fp4_tile_scale_byte(1e-30f, false), 0x01);  // clamp to 2^-9
  EXPECT_EQ(cpu::fp4_tile_scale_byte(6 * 0x1p-9f, false), 0x01);
  EXPECT_EQ(cpu::fp4_tile_scale_byte(6 * 0x1p-8f, false), 0x02);  // 2^-8: subnormal 2 * 2^-9
  EXPECT_EQ(cpu::fp4_tile_scale_byte(2688.0f, false), 0x7e);      // 448
  EXPECT_EQ(cpu::fp4_tile_scale_byte(3000.0f, false), 0x7e);      // clamp to 448
  EXPECT_EQ(cpu::fp4_tile_scale_byte(kInf, false), 0x7e);
  EXPECT_EQ(cpu::fp4_tile_scale_byte(3.0f, false), 0x30);      // 0.5
  EXPECT_EQ(cpu::fp4_tile_scale_byte(1.0f, false), 0x23);      // 1/6 -> 0.171875
  EXPECT_EQ(cpu::fp4_tile_scale_byte(2.25f, false), 0x2c);     // 0.375 exactly: 1.5 * 2^-2
  EXPECT_EQ(cpu::fp4_tile_scale_byte(2.4375f, false), 0x2d);   // 0.40625 = 1.625 * 2^-2
  EXPECT_EQ(cpu::fp4_tile_scale_byte(2.34375f, false), 0x2c);  // 0.390625: tie -> even 0.375
  EXPECT_EQ(cpu::fp4_tile_scale_byte(2.53125f, false), 0x2e);  // 0.421875: tie -> even 0.4375
  EXPECT_EQ(cpu::fp4_tile_scale_byte(1.0f, true), 0x7f);
  EXPECT_EQ(cpu::fp4_tile_scale_byte(kNaN, false), 0x7f);
}

// Quantizing whole tiles: the clamps, the NaN tile reading NaN, every other tile untouched.
TEST(Fp4Scale, QuantizedTilesFollowTheRules) {
  Cache c = make_cache(KvCacheFormat::kV41Fp4, kPageSplit, 1, 1);
  std::vector<uint16_t> rows(512, 0);
  for (int i = 0; i < 16; ++i) rows[16 + i] = float_to_bf16(1e-6f * (i + 1));  // tile 1: tiny
  for (int i = 0; i < 16; ++i) rows[32 + i] = float_to_bf16(-1e5f);            // tile 2: huge
  rows[48 + 3] = kBf16NaN;                                                     // tile 3: NaN
  rows[48 + 4] = float_to_bf16(2.0f);
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i < 16; ++i) rows[64 + i] = float_to_bf16(i < 8 ? grid[i] : -grid[i - 8]);
  ASSERT_TRUE(quantize_kv_cache(rows_view(rows, 1, 1), c.view).ok());
  const uint8_t* scales = c.bytes.data() + 256;
  EXPECT_EQ(scales[0], 0x01);
  EXPECT_EQ(scales[1], 0x01);  // 1.6e-5 / 6 -> clamped up to 2^-9
  EXPECT_EQ(scales[2], 0x7e);  // 1e5 / 6 -> clamped down to 448
  EXPECT_EQ(scales[3], 0x7f);  // NaN
  EXPECT_EQ(scales[4], 0x38);  // 6 / 6 = 1
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c.bytes[24 + i], 0) << "NaN tile codes are 0";
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c.bytes[16 + i], 0xff) << "-1e5 / 448 saturates to -6";
  std::vector<float> row(512);
  dequantize_kv_token(c.view, 0, row.data());
  for (int i = 48; i < 64; ++i) EXPECT_TRUE(std::isnan(row[i])) << i;
  for (int i = 32; i < 48; ++i) EXPECT_EQ(row[i], -2688.0f);
  for (int i = 64; i < 80; ++i) {
    EXPECT_EQ(row[i], i < 72 ? grid[i - 64] : -grid[i - 72]) << "values on the grid are exact";
  }
  for (int i = 80; i < 512; ++i) EXPECT_EQ(row[i], 0.0f);
}

// ---- quantize -> dequantize against a float64 model ----------------------------------------

// e4m3 round-to-nearest-even in double, by search over the finite codes (saturating at 448).
double model_e4m3(double x) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (int code = 0; code < 0x7f; ++code) {  // the non-negative finite codes, ascending
      const int e = code >> 3, m = code & 7;
      v.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7));
    }
    return v;
  }();
  const double a = std::min(std::fabs(x), 448.0);
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    const double d = std::fabs(values[i] - a), db = std::fabs(values[best] - a);
    if (d < db || (d == db && i % 2 == 0)) best = i;  // tie: the even code
  }
  return std::copysign(values[best], x);
}

double model_e2m1(double x) {
  const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double a = std::min(std::fabs(x), 6.0);
  int best = 0;
  for (int i = 1; i < 8; ++i) {
    const double d = std::fabs(grid[i] - a), db = std::fabs(grid[best] - a);
    if (d < db || (d == db && i % 2 == 0)) best = i;
  }
  return std::copysign(grid[best], x);
}

// The dequantized row the reference quantizer's rules give, in double.
std::vector<double> model_row(KvCacheFormat format, const uint16_t* x) {
  std::vector<double> v(512);
  for (int i = 0; i < 512; ++i) v[i] = bf16_to_float(x[i]);
  std::vector<double> out(512);
  const int tile = format == KvCacheFormat::kV41Fp4 ? 16 : 32;
  for (int t0 = 0; t0 < 512; t0 += tile) {
    double amax = 0;
    bool nan = false;
    for (int i = t0; i < t0 + tile; ++i) {
      nan |= std::isnan(v[i]);
      if (!std::isnan(v[i])) amax = std::max(amax, std::fabs(v[i]));
    }
    for (int i = t0; i < t0 + tile; ++i) {
      if (nan) {
        out[i] = kNaN;
      } else if (format == KvCacheFormat::kV41Fp4) {
        const double s = model_e4m3(std::clamp(amax / 6, std::ldexp(1.0, -9), 448.0));
        out[i] = model_e2m1(v[i] / s) * s;
      } else {
        const double s = std::exp2(std::ceil(std::log2(std::max(amax / 448, 1e-4))));
        out[i] = model_e4m3(v[i] / s) * s;
      }
    }
  }
  return out;
}

TEST(V41Codec, QuantizeDequantizeMatchesFloat64Model) {
  std::mt19937_64 rng(41);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-22, 14);
  const int64_t blocks = 3, pbs = 7;
  std::vector<uint16_t> rows(blocks * pbs * 512);
  for (size_t tile = 0; tile < rows.size() / 16; ++tile) {
    // Every 16 values one magnitude: the clamps of both scale rules and everything between.
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < 16; ++i) rows[tile * 16 + i] = float_to_bf16(normal(rng) * scale);
  }
  rows[5 * 512 + 100] = kBf16NaN;
  rows[6 * 512 + 7] = float_to_bf16(-kInf);
  for (KvCacheFormat format : {KvCacheFormat::kV41Fp8, KvCacheFormat::kV41Fp4}) {
    for (KvLayout layout : {kPageSplit, kTokenInterleaved}) {
      SCOPED_TRACE(std::string(kv_cache_format_name(format)) + " " + kv_layout_name(layout));
      Cache c = make_cache(format, layout, blocks, pbs, 0xcd, layout == kPageSplit ? 512 : 0);
      ASSERT_TRUE(quantize_kv_cache(rows_view(rows, blocks, pbs), c.view).ok());
      std::vector<float> out(rows.size());
      ASSERT_TRUE(dequantize_kv_cache(c.view, TensorView::contiguous(out.data(), DType::kFloat32,
                                                                     {blocks, pbs, 1, 512}))
                      .ok());
      for (int64_t r = 0; r < blocks * pbs; ++r) {
        if (format == KvCacheFormat::kV41Fp8 && r == 6) continue;  // inf: scale inf, 0xff
        const std::vector<double> model = model_row(format, &rows[r * 512]);
        for (int i = 0; i < 512; ++i) {
          ASSERT_TRUE(same_bits(out[r * 512 + i], static_cast<float>(model[i])))
              << "row " << r << " dim " << i << ": " << out[r * 512 + i] << " vs " << model[i];
        }
      }
    }
  }
}

// ---- write_kv_cache ------------------------------------------------------------------------

// The byte offsets of token `slot`'s record in a V4.1 cache (SPEC §4's layout table).
std::vector<int64_t> record_offsets(const KvCacheView& c, int64_t slot) {
  const bool fp8 = c.format == KvCacheFormat::kV41Fp8;
  const int64_t data = fp8 ? 512 : 256, scales = fp8 ? 16 : 32, pbs = c.page_block_size;
  const int64_t block = (slot / pbs) * c.block_stride_bytes, t = slot % pbs;
  std::vector<int64_t> offsets;
  const int64_t d0 = c.layout == kTokenInterleaved ? block + t * (data + scales) : block + t * data;
  const int64_t s0 = c.layout == kTokenInterleaved ? d0 + data : block + pbs * data + t * scales;
  for (int64_t i = 0; i < data; ++i) offsets.push_back(d0 + i);
  for (int64_t i = 0; i < scales; ++i) offsets.push_back(s0 + i);
  return offsets;
}

std::vector<uint16_t> random_rows(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> rows(n * 512);
  for (auto& v : rows) v = float_to_bf16(normal(rng) / 10 + 0.02f);
  return rows;
}

constexpr std::pair<KvCacheFormat, KvLayout> kV41Caches[] = {
    {KvCacheFormat::kV41Fp8, kPageSplit},
    {KvCacheFormat::kV41Fp8, kTokenInterleaved},
    {KvCacheFormat::kV41Fp4, kPageSplit},
    {KvCacheFormat::kV41Fp4, kTokenInterleaved},
};

// Writing every slot in a shuffled order (padded row stride, strided slot mapping) gives the
// bytes quantize_kv_cache gives, for every format and layout, on one thread and on several.
TEST(WriteKvCache, EveryFormatEqualsQuantizeKvCache) {
  for (const auto& fc : test_support::kAllCacheFormats) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE(fc.name() + " threads " + std::to_string(threads));
      const int64_t blocks = 5, pbs = 61, n = blocks * pbs, d = fc.d_qk;
      std::vector<uint16_t> rows(n * d);
      {
        std::mt19937_64 rng(7);
        std::normal_distribution<float> normal;
        for (auto& v : rows) v = float_to_bf16(normal(rng) / 10);
      }
      KvCacheView view{nullptr,
                       fc.format,
                       blocks,
                       pbs,
                       kv_cache_min_block_stride(fc.format, pbs, fc.d_qk, fc.layout),
                       fc.d_qk,
                       Device::cpu(),
                       fc.layout};
      std::vector<uint8_t> expected(blocks * view.block_stride_bytes, 0xcd);
      std::vector<uint8_t> got(expected.size(), 0xcd);
      view.data = expected.data();
      ASSERT_TRUE(
          quantize_kv_cache(
              TensorView::contiguous(rows.data(), DType::kBFloat16, {blocks, pbs, 1, d}), view)
              .ok());
      // Zero padding first (quantize a zero cache), then every record through the writer.
      std::vector<uint16_t> zeros(n * d, 0);
      view.data = got.data();
      ASSERT_TRUE(
          quantize_kv_cache(
              TensorView::contiguous(zeros.data(), DType::kBFloat16, {blocks, pbs, 1, d}), view)
              .ok());
      std::vector<int64_t> order(n);
      for (int64_t i = 0; i < n; ++i) order[i] = (i * 37) % n;  // 37 is prime to 305
      const int64_t row_stride = d + 8;
      std::vector<uint16_t> padded(n * row_stride, kBf16NaN);
      std::vector<int32_t> slots(2 * n, INT_MAX);  // every other entry (stride 2)
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(&padded[i * row_stride], &rows[order[i] * d], 2 * d);
        slots[2 * i] = static_cast<int32_t>(order[i]);
      }
      RunOptions options;
      options.num_threads = threads;
      const Status s = write_kv_cache(
          TensorView::strided(padded.data(), DType::kBFloat16, {n, d}, {row_stride, 1}),
          TensorView::strided(slots.data(), DType::kInt32, {n}, {2}), view, options);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(got, expected);
    }
  }
}

TEST(WriteKvCache, SkipsNegativeSlotsAndLeavesOtherTokensUntouched) {
  for (const auto& [format, layout] : kV41Caches) {
    SCOPED_TRACE(std::string(kv_cache_format_name(format)) + " " + kv_layout_name(layout));
    const int64_t blocks = 3, pbs = 4;
    std::vector<uint16_t> rows = random_rows(5, 3);
    std::vector<int32_t> slots = {9, -1, 2, INT_MIN, 5};
    const int64_t pad = kv_cache_format_info(format, layout).block_alignment;
    Cache w = make_cache(format, layout, blocks, pbs, 0xcd, pad);
    ASSERT_TRUE(write_kv_cache(TensorView::contiguous(rows.data(), DType::kBFloat16, {5, 512}),
                               TensorView::contiguous(slots.data(), DType::kInt32, {5}), w.view)
                    .ok());
    // The expected records: the same rows quantized at their slots by quantize_kv_cache.
    std::vector<uint16_t> full(blocks * pbs * 512, 0);
    for (int i : {0, 2, 4}) std::memcpy(&full[slots[i] * 512], &rows[i * 512], 1024);
    Cache q = make_cache(format, layout, blocks, pbs, 0xcd, pad);
    ASSERT_TRUE(quantize_kv_cache(rows_view(full, blocks, pbs), q.view).ok());
    std::vector<bool> written(w.bytes.size(), false);
    for (int i : {0, 2, 4}) {
      for (int64_t o : record_offsets(w.view, slots[i])) {
        written[o] = true;
        ASSERT_EQ(w.bytes[o], q.bytes[o]) << "slot " << slots[i] << " offset " << o;
      }
    }
    for (size_t o = 0; o < w.bytes.size(); ++o) {
      if (!written[o]) ASSERT_EQ(w.bytes[o], 0xcd) << "offset " << o << " was touched";
    }
  }
}

TEST(WriteKvCache, ASlotMappedTwiceGetsTheLastRow) {
  Cache a = make_cache(KvCacheFormat::kV41Fp4, kPageSplit, 2, 3);
  Cache b = make_cache(KvCacheFormat::kV41Fp4, kPageSplit, 2, 3);
  std::vector<uint16_t> rows = random_rows(3, 5);
  std::vector<int32_t> twice = {4, 1, 4};
  std::vector<int32_t> once = {1, 4};
  ASSERT_TRUE(write_kv_cache(TensorView::contiguous(rows.data(), DType::kBFloat16, {3, 512}),
                             TensorView::contiguous(twice.data(), DType::kInt32, {3}), a.view)
                  .ok());
  ASSERT_TRUE(write_kv_cache(TensorView::contiguous(rows.data() + 512, DType::kBFloat16, {2, 512}),
                             TensorView::contiguous(once.data(), DType::kInt32, {2}), b.view)
                  .ok());
  EXPECT_EQ(a.bytes, b.bytes);
}

TEST(WriteKvCache, ASlotPastTheCacheIsAnErrorAndNothingIsWritten) {
  Cache c = make_cache(KvCacheFormat::kV41Fp8, kTokenInterleaved, 2, 3);
  const std::vector<uint8_t> before = c.bytes;
  std::vector<uint16_t> rows = random_rows(3, 1);
  for (int32_t bad : {6, 114514, INT_MAX}) {
    std::vector<int32_t> slots = {0, bad, 2};
    const Status s =
        write_kv_cache(TensorView::contiguous(rows.data(), DType::kBFloat16, {3, 512}),
                       TensorView::contiguous(slots.data(), DType::kInt32, {3}), c.view);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("write_kv_cache: slot_mapping[1] = " + std::to_string(bad) +
                                       " is out of range for a cache of 6 slots"));
    EXPECT_EQ(c.bytes, before) << "slot 0 was written before the bad slot was found";
  }
  // No rows at all: nothing to do.
  EXPECT_TRUE(write_kv_cache(TensorView::contiguous(rows.data(), DType::kBFloat16, {0, 512}),
                             TensorView::contiguous(rows.data(), DType::kInt32, {0}), c.view)
                  .ok());
  EXPECT_EQ(c.bytes, before);
}

TEST(WriteKvCache, ArgumentsAreValidated) {
  Cache c = make_cache(KvCacheFormat::kV41Fp8, kPageSplit, 2, 3);
  const std::vector<uint8_t> before = c.bytes;
  std::vector<uint16_t> rows = random_rows(4, 1);
  std::vector<int32_t> slots = {0, 1, 2, 3};
  const TensorView r = TensorView::contiguous(rows.data(), DType::kBFloat16, {4, 512});
  const TensorView s = TensorView::contiguous(slots.data(), DType::kInt32, {4});
  auto message = [&](TensorView rr, TensorView ss, KvCacheView cc, RunOptions o = {}) {
    const Status st = write_kv_cache(rr, ss, cc, o);
    EXPECT_FALSE(st.ok());
    return st.message();
  };
  TensorView t = r;
  t.dtype = DType::kFloat32;
  EXPECT_THAT(message(t, s, c.view), HasSubstr("write_kv_cache: rows.dtype = fp32 must be bf16"));
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {4, 1, 512});
  EXPECT_THAT(message(t, s, c.view), HasSubstr("rows is [4, 1, 512] bf16"));
  t = TensorView::contiguous(rows.data(), DType::kBFloat16, {4, 576});
  EXPECT_THAT(message(t, s, c.view),
              HasSubstr("rows.sizes[1] (d_qk) = 576 does not match the cache's 512"));
  t = TensorView::strided(rows.data(), DType::kBFloat16, {4, 256}, {512, 2});
  t.sizes[1] = 512;
  EXPECT_THAT(message(t, s, c.view), HasSubstr("rows.strides[1] = 2 must be 1"));
  t = r;
  t.strides[0] = -512;
  EXPECT_THAT(message(t, s, c.view), HasSubstr("rows.strides[0] = -512 is negative"));
  t = r;
  t.data = nullptr;
  EXPECT_THAT(message(t, s, c.view), HasSubstr("rows.data is null"));
  TensorView m = s;
  m.dtype = DType::kFloat32;
  EXPECT_THAT(message(r, m, c.view), HasSubstr("slot_mapping.dtype = fp32 must be int32"));
  m = TensorView::contiguous(slots.data(), DType::kInt32, {3});
  EXPECT_THAT(message(r, m, c.view),
              HasSubstr("slot_mapping.sizes[0] = 3 differs from rows.sizes[0] (n) = 4"));
  m = TensorView::contiguous(slots.data(), DType::kInt32, {2, 2});
  EXPECT_THAT(message(r, m, c.view), HasSubstr("expected rank 1 [n]"));
  m = s;
  m.device = Device::cuda(0);
  EXPECT_THAT(message(r, m, c.view),
              HasSubstr("slot_mapping.device = cuda:0 differs from cache.device = cpu"));
  KvCacheView bad = c.view;
  bad.layout = static_cast<KvLayout>(5);
  EXPECT_THAT(message(r, s, bad),
              HasSubstr("write_kv_cache: cache.layout = 5 is not a layout of format v41_fp8"));
  bad = c.view;
  bad.block_stride_bytes = 2048 + 528;
  EXPECT_THAT(message(r, s, bad),
              HasSubstr("cache.block_stride_bytes = 2576 is not a multiple of 512 as v41_fp8 "
                        "page_split requires"));
  RunOptions cuda;
  cuda.backend = Backend::kCuda;
  EXPECT_THAT(message(r, s, c.view, cuda),
              HasSubstr("options.backend = cuda cannot run on a cache on cpu"));
  EXPECT_EQ(c.bytes, before);
}

// A cache on a CUDA device goes to the device codec; without one in this build the call fails
// cleanly instead of touching the (host) pointers.
TEST(WriteKvCache, DeviceCachesGoToTheDeviceCodec) {
  if (cuda_available()) GTEST_SKIP() << "the GPU tests run the device codec";
  Cache c = make_cache(KvCacheFormat::kV41Fp4, kTokenInterleaved, 2, 3);
  std::vector<uint16_t> rows = random_rows(2, 1);
  std::vector<int32_t> slots = {0, 1};
  TensorView r = TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 512}, Device::cuda(0));
  TensorView s = TensorView::contiguous(slots.data(), DType::kInt32, {2}, Device::cuda(0));
  KvCacheView v = c.view;
  v.device = Device::cuda(0);
  const std::vector<uint8_t> before = c.bytes;
  EXPECT_FALSE(write_kv_cache(r, s, v).ok());
  std::vector<uint16_t> all(6 * 512, 0);
  EXPECT_FALSE(
      quantize_kv_cache(
          TensorView::contiguous(all.data(), DType::kBFloat16, {2, 3, 1, 512}, Device::cuda(0)), v)
          .ok());
  EXPECT_EQ(c.bytes, before);
  KvCacheView odd = c.view;
  odd.device = Device{static_cast<DeviceType>(7), 0};
  EXPECT_THAT(write_kv_cache(TensorView::contiguous(rows.data(), DType::kBFloat16, {2, 512}),
                             TensorView::contiguous(slots.data(), DType::kInt32, {2}), odd)
                  .message(),
              HasSubstr("cache.device = device type 7 is neither the cpu nor a CUDA device"));
}

// pack_kv_token for the V4.1 records: no bf16 tail, so rope must be null.
TEST(V41Codec, PackTokenTakesNoRope) {
  Cache c = make_cache(KvCacheFormat::kV41Fp4, kTokenInterleaved, 1, 2);
  std::vector<uint8_t> values(256, 0x21), scales(32, 0x38);
  std::vector<uint16_t> rope(64, 0);
  EXPECT_THAT(pack_kv_token(c.view, 0, values.data(), scales.data(), rope.data()).message(),
              HasSubstr("pack_kv_token: rope must be null for format v41_fp4"));
  ASSERT_TRUE(pack_kv_token(c.view, 1, values.data(), scales.data(), nullptr).ok());
  std::vector<float> row(512);
  dequantize_kv_token(c.view, 1, row.data());
  for (int i = 0; i < 512; ++i) ASSERT_EQ(row[i], i % 2 == 0 ? 0.5f : 1.0f) << i;
  KvCacheView on_device = c.view;
  on_device.device = Device::cuda(0);
  EXPECT_THAT(pack_kv_token(on_device, 1, values.data(), scales.data(), nullptr).message(),
              HasSubstr("pack_kv_token: cache.device = cuda:0"));
}

}  // namespace
}  // namespace sparse_mla
