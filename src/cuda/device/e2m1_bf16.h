// The integer half of the e2m1 -> bf16 decode (fp4_dequant.cuh): eight e2m1 codes of one 32-bit
// word (code i in bits 4i..4i+3) -> four bf16 pairs (value 2k in the low half), unscaled. Plain
// C++ apart from SMLA_HOST_DEVICE and the byte permute (PTX prmt on the device, the same selection
// on the host), so the CPU suite checks it against the e2m1 rule of core/e2m1.h for every code
// word pattern it can reach (tests/cpp/cuda_codec_rules_test.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::cuda {

// __byte_perm(x, y, s): byte n of the result is byte (s >> 4n) & 7 of the 8 bytes y:x.
SMLA_HOST_DEVICE inline uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t sel = (s >> (4 * n)) & 7u;
    r |= static_cast<uint32_t>((bytes >> (8 * sel)) & 0xffu) << (8 * n);
  }
  return r;
#endif
}

struct E2m1Bf16x8 {
  uint32_t x, y, z, w;  // bf16 pairs of codes (0, 1), (2, 3), (4, 5), (6, 7)
};

// bf16 bit patterns of the e2m1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}:
//   0x0000 0x3f00 0x3f80 0x3fc0 0x4000 0x4040 0x4080 0x40c0
// as two 8-entry byte tables (entries 0-3 in the first word, 4-7 in the second).
inline constexpr uint32_t kE2m1Bf16HighLo = 0x3f3f3f00u;
inline constexpr uint32_t kE2m1Bf16HighHi = 0x40404040u;
inline constexpr uint32_t kE2m1Bf16LowLo = 0xc0800000u;
inline constexpr uint32_t kE2m1Bf16LowHi = 0xc0804000u;

// The bf16 pairs (value 2k in the low half) of the 8 codes in `codes`, unscaled.
SMLA_HOST_DEVICE inline E2m1Bf16x8 e2m1x8_to_bf16(uint32_t codes) {
  // __byte_perm reads the low 3 bits of each selector nibble (the magnitude index) and ignores the
  // sign bit; nibbles 0-3 select codes 0-3, so codes >> 16 selects codes 4-7.
  const uint32_t high03 = byte_perm(kE2m1Bf16HighLo, kE2m1Bf16HighHi, codes);
  const uint32_t high47 = byte_perm(kE2m1Bf16HighLo, kE2m1Bf16HighHi, codes >> 16);
  const uint32_t low03 = byte_perm(kE2m1Bf16LowLo, kE2m1Bf16LowHi, codes);
  const uint32_t low47 = byte_perm(kE2m1Bf16LowLo, kE2m1Bf16LowHi, codes >> 16);
  // pair (2k, 2k+1) = [low 2k, high 2k, low 2k+1, high 2k+1]; the sign of code i is bit 4i + 3.
  E2m1Bf16x8 v;
  v.x =
      byte_perm(low03, high03, 0x5140u) | ((codes << 12) & 0x8000u) | ((codes << 24) & 0x80000000u);
  v.y =
      byte_perm(low03, high03, 0x7362u) | ((codes << 4) & 0x8000u) | ((codes << 16) & 0x80000000u);
  v.z = byte_perm(low47, high47, 0x5140u) | ((codes >> 4) & 0x8000u) | ((codes << 8) & 0x80000000u);
  v.w = byte_perm(low47, high47, 0x7362u) | ((codes >> 12) & 0x8000u) | (codes & 0x80000000u);
  return v;
}

}  // namespace sparse_mla::cuda
