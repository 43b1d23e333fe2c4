// ue8m0 scale bytes (SPEC §4, v4_fp8: one per 64-value tile): the fp32 bit pattern of the scale,
// one rule for the CPU back end and the CUDA kernels.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::detail {

// 2^(byte - 127); 0 -> 2^-127 (the fp32 subnormal 0x00400000), 0xff -> NaN (0x7fc00000), as OCP
// MX and torch's float8_e8m0fnu read them. Branch-free: byte << 23 is the fp32 2^(byte - 127) for
// 1..254, and the two special bytes also get bit 22. (A branch here kept nvcc from interleaving
// the unrolled rows of the decode kernels' dequantisation; ncu: its compare was the top stall.)
SMLA_HOST_DEVICE inline uint32_t ue8m0_fp32_bits(uint32_t byte) {
  const uint32_t special = byte == 0u || byte == 0xffu ? 0x00400000u : 0u;
  return (byte << 23) | special;
}

}  // namespace sparse_mla::detail
