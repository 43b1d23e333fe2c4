// e2m1 (FP4) values of the v41_fp4 cache (SPEC §4): one rule for the host codec, the CPU back end
// and the CUDA kernels. A code is 4 bits: sign bit 3, magnitude index bits 0-2 selecting
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}; two codes share a byte, the even-indexed value in the low nibble.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::detail {

// The fp32 bit pattern of code & 0xf. Magnitude m >= 2 is 2^((m >> 1) - 1) * (1 + (m & 1) / 2):
// exponent field (m >> 1) + 126 and the top mantissa bit m & 1; m = 1 is 0.5, m = 0 is 0.
SMLA_HOST_DEVICE constexpr uint32_t e2m1_fp32_bits(uint32_t code) {
  const uint32_t m = code & 7u;
  const uint32_t magnitude = m >= 2u ? (((m >> 1) + 126u) << 23) | ((m & 1u) << 22)
                             : m == 1u ? 0x3f000000u
                                       : 0u;
  return magnitude | ((code & 8u) << 28);
}

// The e2m1 code of an fp32 value given as bits, as PTX cvt.rn.satfinite.e2m1x2.f32 rounds it:
// to nearest, ties to the even code (the one whose bit 0 is clear), |x| > 5 (and +-inf) saturating
// to +-6. NaN gives code 0 (the quantizer's rule: a NaN tile is carried by its scale). The sign is
// kept for every other input, so -0 and negatives that round to 0 give 0x8.
// The midpoints between neighbours are 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5; each tie goes to the
// even code, hence the alternating <= and <.
SMLA_HOST_DEVICE constexpr uint8_t e2m1_code_of_fp32_bits(uint32_t bits) {
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0;  // NaN
  const uint8_t sign = static_cast<uint8_t>((bits >> 28) & 8u);
  // Compare as ordered integers: non-negative fp32 bit patterns sort like their values.
  uint8_t m;
  if (abs_bits <= 0x3e800000u) {  // 0.25
    m = 0;
  } else if (abs_bits < 0x3f400000u) {  // 0.75
    m = 1;
  } else if (abs_bits <= 0x3fa00000u) {  // 1.25
    m = 2;
  } else if (abs_bits < 0x3fe00000u) {  // 1.75
    m = 3;
  } else if (abs_bits <= 0x40200000u) {  // 2.5
    m = 4;
  } else if (abs_bits < 0x40600000u) {  // 3.5
    m = 5;
  } else if (abs_bits <= 0x40a00000u) {  // 5
    m = 6;
  } else {
    m = 7;
  }
  return sign | m;
}

}  // namespace sparse_mla::detail
