// FP8 (e4m3fn) and ue8m0 decoding for the decode kernels' shared-memory dequantisation pass.
// Exact: e4m3 -> f16 (exact) -> fp32 (exact), times the fp32 scale in fp32 (one rounding, the
// reference's own), then round-to-nearest-even to bf16 for the MMA. The scale is never rounded
// to bf16 first (SPEC §4: any finite fp32 scale of v32_fp8 is applied as is).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/ue8m0.h"
#include "cuda/device/e4m3_bf16.h"
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

// Sixteen e4m3 values of one ue8m0 tile (a 16-B unit) times 2^(E - 127) -> sixteen bf16 (lo: the
// first eight), the same bits as dequant_e4m3x8 with ue8m0_to_float(E): the codes are placed
// (e4m3_bf16.h: three integer operations per two values) and scaled by one bf16 multiply per two
// values (two for E > 134), where the conversion path takes two conversions, two fp32 multiplies
// and a pack. A unit holding a NaN code takes the conversion path.
__device__ __forceinline__ void dequant_e4m3x16_ue8m0(const uint4& raw, uint32_t e, uint4& lo,
                                                      uint4& hi) {
  if ((e4m3x4_nan_bytes(raw.x) | e4m3x4_nan_bytes(raw.y) | e4m3x4_nan_bytes(raw.z) |
       e4m3x4_nan_bytes(raw.w)) != 0u) {
    const float scale = ue8m0_to_float(e);
    lo = dequant_e4m3x8(make_uint2(raw.x, raw.y), scale);
    hi = dequant_e4m3x8(make_uint2(raw.z, raw.w), scale);
    return;
  }
  const Ue8m0Bf16Factors f = ue8m0_bf16_factors(e);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = ptx::bf16x2_mul(e4m3x2_bf16x2_times_2_pow_minus_120<0>(words[i]), f.first);
    out[2 * i + 1] = ptx::bf16x2_mul(e4m3x2_bf16x2_times_2_pow_minus_120<1>(words[i]), f.first);
  }
  if (f.second != 0u) {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = ptx::bf16x2_mul(out[i], f.second);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

}  // namespace sparse_mla::cuda
