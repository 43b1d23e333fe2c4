// The device codec's scalar rules (src/cuda/codec/quantize_rules.h, compiled here as host code)
// against the host codec's (cpu/fp8.h), bit for bit, over every bf16 value and a dense sweep of
// fp32 quotients: the GPU kernels run the same functions, so these tests pin them without a GPU.
#include "cuda/codec/quantize_rules.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/fp8.h"

namespace sparse_mla {
namespace {

namespace rules = cuda::codec;

bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
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

}  // namespace
}  // namespace sparse_mla
