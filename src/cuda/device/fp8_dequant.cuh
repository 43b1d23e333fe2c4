// FP8 (e4m3fn) and ue8m0 decoding for the decode kernels' shared-memory dequantisation pass.
// Exact: e4m3 -> f16 (exact) -> fp32 (exact), times the fp32 scale in fp32 (one rounding, the
// reference's own), then round-to-nearest-even to bf16 for the MMA. The scale is never rounded
// to bf16 first (SPEC §4: any finite fp32 scale of v32_fp8 is applied as is).
//
// A power-of-two (ue8m0) scale also has a cheaper exact form: the e4m3 value goes to bf16 first
// (exact: 4 significant bits), then one bf16 multiply by the scale as bf16 (exact too: bf16 has
// fp32's exponent range, 2^-127 is its subnormal 0x0040). The product of a 4-bit significand and
// a power of two is exact in fp32, so both forms round that same exact product once to nearest
// even: bf16 of the same bits, overflow to inf, subnormals kept (HMUL2.BF16 does not flush; the
// GPU test Fp8DequantGpu compares both forms on every code and scale byte), NaN codes and the
// NaN scale byte NaN. One HMUL2 per two values instead of two FMUL.
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

// ue8m0 scale byte -> the scale as bf16 in both halves (the fp32 pattern's upper half: exact).
__device__ __forceinline__ uint32_t ue8m0_to_bf16x2(uint32_t byte) {
  return __byte_perm(::sparse_mla::detail::ue8m0_fp32_bits(byte), 0u, 0x3232);
}

// Two e4m3 values (low byte = first) times a power-of-two scale given as bf16x2
// (ue8m0_to_bf16x2), as bf16x2: the same bits as dequant_e4m3x2 with that scale in fp32.
__device__ __forceinline__ uint32_t dequant_e4m3x2_pow2(uint32_t pair, uint32_t scale_bf16x2) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return ptx::mul_bf16x2(ptx::pack_bf16x2(f.x, f.y), scale_bf16x2);
}

// Eight e4m3 values (8 bytes, first value in the lowest byte) -> eight bf16 (16 bytes), two at a
// time by `pair` (one of the two forms above with its scale).
template <class PairForm>
__device__ __forceinline__ uint4 dequant_e4m3x8_by(uint2 raw, const PairForm& pair) {
  return make_uint4(pair(raw.x & 0xffffu), pair(raw.x >> 16), pair(raw.y & 0xffffu),
                    pair(raw.y >> 16));
}

__device__ __forceinline__ uint4 dequant_e4m3x8(uint2 raw, float scale) {
  return dequant_e4m3x8_by(raw, [scale](uint32_t p) { return dequant_e4m3x2(p, scale); });
}

// dequant_e4m3x8 with a power-of-two scale as bf16x2 (ue8m0_to_bf16x2).
__device__ __forceinline__ uint4 dequant_e4m3x8_pow2(uint2 raw, uint32_t scale_bf16x2) {
  return dequant_e4m3x8_by(
      raw, [scale_bf16x2](uint32_t p) { return dequant_e4m3x2_pow2(p, scale_bf16x2); });
}

}  // namespace sparse_mla::cuda
