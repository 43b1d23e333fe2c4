// The device codec's scalar rules (src/cuda/codec/quantize_rules.h, compiled here as host code)
// against the host codec's (cpu/fp8.h), bit for bit, over every bf16 value and a dense sweep of
// fp32 quotients: the GPU kernels run the same functions, so these tests pin them without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/e2m1.h"
#include "cpu/fp8.h"
#include "cuda/codec/quantize_rules.h"
#include "cuda/device/e2m1_bf16.h"
#include "cuda/device/page_divider.h"

namespace sparse_mla {
namespace {

namespace rules = cuda::codec;

bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// Every bf16 value, plus fp32 values between them (quotients x / s are not bf16).
std::vector<float> sweep() {
  std::vector<float> v;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    v.push_back(std::bit_cast<float>(b << 16));
    v.push_back(std::bit_cast<float>((b << 16) | 0x8000u));  // a midpoint of bf16 neighbours
    v.push_back(std::bit_cast<float>((b << 16) | 0x7fffu));
    v.push_back(std::bit_cast<float>((b << 16) | 0x0001u));
  }
  return v;
}

TEST(CudaCodecRules, E4m3EncodeAndDecodeMatchTheHost) {
  for (float x : sweep()) {
    ASSERT_EQ(rules::float_to_e4m3(x), cpu::float_to_e4m3_inline(x)) << std::bit_cast<uint32_t>(x);
  }
  for (uint32_t code = 0; code < 256; ++code) {
    ASSERT_TRUE(same_float(rules::e4m3_value(code), cpu::kE4m3ToFloat[code])) << code;
  }
}

TEST(CudaCodecRules, E2m1EncodeAndDecodeMatchTheHost) {
  for (float x : sweep()) {
    ASSERT_EQ(rules::float_to_e2m1(x), cpu::float_to_e2m1_inline(x)) << std::bit_cast<uint32_t>(x);
  }
  for (uint32_t code = 0; code < 16; ++code) {
    ASSERT_TRUE(same_float(rules::e2m1_value(code), cpu::kE2m1ToFloat[code])) << code;
  }
}

TEST(CudaCodecRules, TileScalesMatchTheHost) {
  for (float x : sweep()) {
    if (x < 0) continue;  // amax >= 0 (NaN included below)
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    ASSERT_TRUE(same_float(rules::fp8_tile_scale(x), cpu::quantizer_tile_scale(x))) << bits;
    ASSERT_EQ(rules::ue8m0_ceil(x), cpu::ue8m0_ceil_inline(x)) << bits;
    const float s = cpu::quantizer_tile_scale(x);
    ASSERT_EQ(rules::ue8m0_ceil(s), cpu::ue8m0_ceil_inline(s)) << bits;
    for (bool has_nan : {false, true}) {
      ASSERT_EQ(rules::fp4_tile_scale_byte(x, has_nan), cpu::fp4_tile_scale_byte(x, has_nan))
          << bits;
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(rules::fp8_tile_scale(nan)));
  EXPECT_EQ(rules::ue8m0_ceil(nan), 0xff);
  EXPECT_EQ(rules::fp4_tile_scale_byte(nan, false), 0x7f);
  EXPECT_EQ(rules::fp4_tile_scale_byte(0.0f, false), 0x01);  // 2^-9
  EXPECT_EQ(rules::fp4_tile_scale_byte(std::numeric_limits<float>::infinity(), false), 0x7e);
}

TEST(CudaCodecRules, Bf16RoundingAndUe8m0MatchTheHost) {
  for (float x : sweep()) {
    ASSERT_EQ(rules::float_to_bf16_bits(x), cpu::float_to_bf16_inline(x))
        << std::bit_cast<uint32_t>(x);
  }
  for (uint32_t byte = 0; byte < 256; ++byte) {
    ASSERT_TRUE(same_float(rules::ue8m0_value(byte), cpu::ue8m0_to_float_inline(byte))) << byte;
  }
}

// The decode kernels' e2m1 -> bf16 lookup (cuda/device/e2m1_bf16.h): every code in every one of the
// 8 positions of a word (the other positions holding a sweep of codes), against core/e2m1.h.
TEST(CudaCodecRules, E2m1ByteLookupGivesEveryCodesBf16) {
  for (uint32_t word = 0; word < (1u << 16); ++word) {
    // Codes 0-3 from `word`, 4-7 from its bits reversed in nibbles: every code everywhere.
    const uint32_t hi =
        ((word & 0xf) << 12) | ((word & 0xf0) << 4) | ((word >> 4) & 0xf0) | ((word >> 12) & 0xf);
    const uint32_t codes = word | (hi << 16);
    const cuda::E2m1Bf16x8 v = cuda::e2m1x8_to_bf16(codes);
    const uint32_t pairs[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 8; ++i) {
      const uint32_t code = (codes >> (4 * i)) & 0xfu;
      const uint32_t want = detail::e2m1_fp32_bits(code) >> 16;  // exact: low half is 0
      const uint32_t got = (pairs[i / 2] >> (16 * (i % 2))) & 0xffffu;
      ASSERT_EQ(got, want) << "word 0x" << std::hex << codes << " position " << i;
    }
  }
}

// Why the kernels' bf16 multiply of code x e4m3 scale is exact: every product of an e2m1 value
// and a finite e4m3 value is a bf16 value (fp32 with the low 16 bits zero).
TEST(CudaCodecRules, E2m1TimesE4m3ScaleIsExactInBf16) {
  for (uint32_t s = 0; s < 256; ++s) {
    const float scale = cpu::kE4m3ToFloat[s];
    if (std::isnan(scale)) continue;
    for (uint32_t code = 0; code < 16; ++code) {
      const float p = cpu::kE2m1ToFloat[code] * scale;
      ASSERT_EQ(std::bit_cast<uint32_t>(p) & 0xffffu, 0u) << "code " << code << " scale " << s;
    }
  }
}

// The Hopper decode's slot -> page split (one multiply-high and a shift) against the division, for
// every page size up to 4096 and the largest the validation lets through, at the slots around
// each page boundary and at the last int32 slots.
TEST(CudaCodecRules, PageDividerMatchesTheDivision) {
  std::vector<uint32_t> sizes;
  for (uint32_t d = 1; d <= 4096; ++d) sizes.push_back(d);
  for (uint32_t d :
       {65537u, 1000003u, (1u << 30) - 1, 1u << 30, (1u << 30) + 3, 0x7fffffffu, 0x80000000u}) {
    sizes.push_back(d);
  }
  for (uint32_t d : sizes) {
    const cuda::PageDivider div(d);
    auto check = [&](uint64_t slot) {
      if (slot > 0x7fffffffu) return;
      const auto n = static_cast<uint32_t>(slot);
      ASSERT_EQ(div.page(n), n / d) << "slot " << n << " page size " << d;
    };
    for (uint64_t page = 0; page < 64; ++page) {
      for (int64_t delta = -2; delta <= 2; ++delta) {
        check(page * d + delta);
      }
    }
    for (uint64_t slot = 0x7fffffffu - 2 * uint64_t{d}; slot <= 0x7fffffffu; slot += d) {
      check(slot);
      check(slot + 1);
    }
    check(0x7fffffffu);
    check(0x7ffffffeu);
  }
}

}  // namespace
}  // namespace sparse_mla
