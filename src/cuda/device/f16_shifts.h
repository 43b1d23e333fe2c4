// The powers of two that bring operands into f16's range for the Hopper decode's f16 path over
// v4_fp8 (cuda/sm90a/sparse_decode/f16_operands.cuh; docs/kernels/sm90a_sparse_decode.md). Plain
// C++ apart from SMLA_HOST_DEVICE, so the CPU suite checks their invariants over every input
// (tests/cpp/cuda_codec_rules_test.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::cuda {

// A q row's shift kq from the bf16 bits of its largest magnitude (sign cleared; a NaN compares
// above inf): the row times 2^kq puts that value in [2^14, 2^15) (at most 2^15 x 448 / 448 below
// f16's 65504), capped at 64 so that 2^-kq stays a normal fp32; 0 for a zero row and for one that
// holds inf or NaN. A subnormal largest counts as exponent -126.
SMLA_HOST_DEVICE inline int f16_q_row_shift(uint32_t largest_bits) {
  const int e = static_cast<int>(largest_bits >> 7) > 1 ? static_cast<int>(largest_bits >> 7) : 1;
  if (largest_bits == 0 || e >= 255) return 0;
  return 141 - e < 64 ? 141 - e : 64;
}

// A block's shift c from the biased ue8m0 exponents (bytes) of its valid tiles, largest and
// smallest (0 = no valid tile): its values e4m3 x 2^(E + c) are exact in f16 while every E + c
// lies in [-15, 7] (e4m3 spans 2^-9 .. 448; f16 2^-24 .. 65504). 0 when the tiles already lie
// there; else the shift that brings the largest to 7, at most 7 down (the block's P is multiplied
// by 2^-c and reaches 2^8 before it, so 2^-c <= 2^7 keeps it in f16), or the smallest to -15, at
// most 14 up (P x 2^-c >= 2^-14 x P keeps P's leading bits normal) and never past the largest's
// room.
SMLA_HOST_DEVICE inline int f16_block_shift(uint32_t largest, uint32_t smallest) {
  if (largest == 0) return 0;
  const int hi = static_cast<int>(largest) - 127, lo = static_cast<int>(smallest) - 127;
  if (hi <= 7 && lo >= -15) return 0;
  if (hi > 7) return 7 - hi > -7 ? 7 - hi : -7;
  int c = -15 - lo;
  if (7 - hi < c) c = 7 - hi;
  return c < 14 ? c : 14;
}

}  // namespace sparse_mla::cuda
