// e4m3 -> bf16 by bit placement, no conversion instruction: the sign goes to bit 15 and the seven
// exponent and mantissa bits to bits 4..10, which reads as the e4m3 value times 2^-120 (e4m3's
// exponent bias is 7, bf16's 127; an e4m3 subnormal lands on a bf16 subnormal of the same
// scaled value). Exact for every code but the NaN codes 0x7f / 0xff, which would read as
// +-480 * 2^-120: callers test for them (e4m3x4_nan_bytes) and take the conversion path. A bf16
// multiply by a power of two then applies 2^120 and a ue8m0 scale in one rounding
// (fp8_dequant.cuh). Plain C++ apart from SMLA_HOST_DEVICE and the byte permute, so the CPU suite
// checks every code and scale (tests/cpp/cuda_codec_rules_test.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::cuda {

// PTX prmt.b32 in its default mode with a zero second operand: byte n of the result is byte
// sel & 3 of x (sel = nibble n of `selector`; 4..7 pick zero), or, where the nibble's bit 3 is
// set, that byte's sign replicated (0x00 or 0xff).
SMLA_HOST_DEVICE inline uint32_t byte_perm_sign(uint32_t x, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(r) : "r"(x), "r"(selector));
  return r;
#else
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t nibble = (selector >> (4 * n)) & 0xfu;
    uint32_t byte = (nibble & 7u) < 4u ? (x >> (8 * (nibble & 7u))) & 0xffu : 0u;
    if (nibble & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
    r |= byte << (8 * n);
  }
  return r;
#endif
}

// Codes 2 k and 2 k + 1 of `word` (code i in byte i) as a bf16 pair (code 2 k in the low half),
// each the e4m3 value times 2^-120. The permute gives each code sign-extended to 16 bits; shifted
// left by 4 its sign lands on bit 15 and its other bits on 4..10, and the mask clears the rest.
template <int kPair>
SMLA_HOST_DEVICE inline uint32_t e4m3x2_bf16x2_times_2_pow_minus_120(uint32_t word) {
  static_assert(kPair == 0 || kPair == 1);
  const uint32_t extended = byte_perm_sign(word, kPair == 0 ? 0x9180u : 0xb3a2u);
  return (extended << 4) & 0x87f087f0u;
}

// Non-zero iff one of the four codes of `word` is a NaN code (magnitude 0x7f): adding 1 to each
// 7-bit magnitude carries into the byte's top bit exactly there.
SMLA_HOST_DEVICE inline uint32_t e4m3x4_nan_bytes(uint32_t word) {
  return ((word & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
}

// The bf16 factors (bits, in both halves) that turn values times 2^-120 into values times the
// ue8m0 scale 2^(E - 127) (E = 0: 2^-127, E = 255: NaN, core/ue8m0.h): for E <= 134 one factor
// 2^(E - 7); above, 2^120 then the scale itself (2^(E - 7) is past bf16's range there). Each
// product of an e4m3 value and a power of two is exact until bf16's subnormals, where the one
// rounding is the reference's fp32 product rounded to bf16.
struct Ue8m0Bf16Factors {
  uint32_t first, second;  // second == 0: one factor
};

SMLA_HOST_DEVICE inline Ue8m0Bf16Factors ue8m0_bf16_factors(uint32_t e) {
  auto both = [](uint32_t h) { return h | (h << 16); };
  if (e <= 134u) return {both((e + 120u) << 7), 0u};
  return {both(247u << 7), both(e == 255u ? 0x7fc0u : e << 7)};
}

}  // namespace sparse_mla::cuda
