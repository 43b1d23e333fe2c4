// FP8 (e4m3fn) and ue8m0 decoding for the decode kernels' shared-memory dequantisation pass.
// Exact: e4m3 -> f16 (exact) -> fp32 (exact), times the fp32 scale in fp32 (one rounding, the
// reference's own), then round-to-nearest-even to bf16 for the MMA. The scale is never rounded
// to bf16 first (SPEC §4: any finite fp32 scale of v32_fp8 is applied as is).
//
// dequant_e4m3x16_pow2 is a shorter path where the scale is a power of two (every v4_fp8 scale
// and the reference quantizer's v32_fp8 ones) with the same result bit for bit: the f16 bits of
// the value moved into bf16's fields (value x 2^-112, exact) and one bf16 multiply by
// scale x 2^112 (exact: every product is a normal bf16). It needs no fp32 -> bf16 conversion,
// by FlashMLA's count the most expensive step on sm_90 (../shared/reference/flashmla-kernels.md
// §4.3).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/ue8m0.h"
#include "cuda/device/ptx/mma.cuh"

namespace sparse_mla::cuda {

// ue8m0 scale byte -> fp32 (core/ue8m0.h: 0 -> 2^-127, 0xff -> NaN, branch-free).
__device__ __forceinline__ float ue8m0_to_float(uint32_t byte) {
  return __uint_as_float(::sparse_mla::detail::ue8m0_fp32_bits(byte));
}

// Two e4m3 values (low byte = first) times `scale`, rounded to bf16x2 (first in the low half).
__device__ __forceinline__ uint32_t dequant_e4m3x2(uint32_t pair, float scale) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return ptx::pack_bf16x2(f.x * scale, f.y * scale);
}

// Eight e4m3 values (8 bytes, first value in the lowest byte) -> eight bf16 (16 bytes).
__device__ __forceinline__ uint4 dequant_e4m3x8(uint2 raw, float scale) {
  uint4 out;
  out.x = dequant_e4m3x2(raw.x & 0xffffu, scale);
  out.y = dequant_e4m3x2(raw.x >> 16, scale);
  out.z = dequant_e4m3x2(raw.y & 0xffffu, scale);
  out.w = dequant_e4m3x2(raw.y >> 16, scale);
  return out;
}

// The bf16x2 multiplier of the power-of-two path: scale x 2^112 in both halves where the scale is
// +-2^E with -117 <= E <= 15 (then |e4m3 value x scale| lies in [2^-126, 448 x 2^15]: a normal
// bf16 with at most 4 significant bits, so the bf16 product is exact and equals the fp32 path's
// one rounding), else 0.
__device__ __forceinline__ uint32_t pow2_scale_bf16x2(float scale) {
  const uint32_t bits = __float_as_uint(scale);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  const bool pow2 = (bits & 0x007fffffu) == 0u && exponent - 10u <= 132u;
  const uint32_t half = (bits >> 16) + (112u << 7);  // sign kept; exponent + 112 <= 254
  return pow2 ? __byte_perm(half, 0u, 0x1010) : 0u;
}

// Two e4m3 values -> bf16x2 of value x 2^-112, and the pair's f16 magnitudes (for the NaN test):
// e4m3 -> f16 is exact and normal (or zero) with the low 7 fraction bits zero, so the magnitude
// shifted right by 3 is the bf16 of the same fraction with the exponent bias 127 for 15.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_scaled_down(uint32_t pair, uint32_t* mags) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  const uint32_t bits = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  *mags = bits & 0x7fff7fffu;
  return (*mags >> 3) | (bits & 0x80008000u);
}

__device__ __forceinline__ uint32_t max_u16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Sixteen e4m3 values (16 bytes, first value lowest) times a power-of-two multiplier
// (pow2_scale_bf16x2) -> sixteen bf16 in lo (values 0-7) and hi (8-15). True where that is
// dequant_e4m3x8's result bit for bit: the multiplier is not 0 and no value is a NaN code (every
// finite e4m3 magnitude is <= 448, f16 0x5f00). Where false the caller takes dequant_e4m3x8
// (rare: a scale off the power-of-two range or a NaN code), after its stores of lo and hi, so
// that neither result is held across the test.
__device__ __forceinline__ bool dequant_e4m3x16_pow2(const uint4& raw, uint32_t scale2, uint4* lo,
                                                     uint4* hi) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
  uint32_t mag_max = 0u;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t mags;
    const uint32_t down =
        e4m3x2_to_bf16x2_scaled_down((words[i / 2] >> (16 * (i % 2))) & 0xffffu, &mags);
    mag_max = max_u16x2(mag_max, mags);
    out[i] = mul_bf16x2(down, scale2);
  }
  *lo = make_uint4(out[0], out[1], out[2], out[3]);
  *hi = make_uint4(out[4], out[5], out[6], out[7]);
  // A half above 0x5f00 (a NaN code) sets bit 15 of its half after adding 0x20ff.
  return scale2 != 0u && ((mag_max + 0x20ff20ffu) & 0x80008000u) == 0u;
}

}  // namespace sparse_mla::cuda
