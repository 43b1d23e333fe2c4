// e2m1 (FP4) decoding for the decode kernels' shared-memory dequantisation of v41_fp4 rows (SPEC
// §4): eight codes of one 32-bit word (code i in bits 4i..4i+3: the even-indexed value in the low
// nibble of its byte) times their tile's e4m3 scale, as eight bf16 for the MMA. Exact: a code value
// has 2 significant bits and an e4m3 scale 4, so code x scale (6 bits, magnitudes 2^-10 .. 2688)
// is representable in bf16 and the bf16 product below rounds nothing; the result equals the
// reference's fp32 product rounded to bf16. A NaN scale (e4m3 0x7f / 0xff) makes the whole tile
// NaN, as the reference reads it.
//
// Cost per 8 values (one 16-B bf16 chunk), from the source: 1 shift, 2 byte permutes look up the
// bf16 high bytes and 2 the low bytes of the 8 magnitudes (two 8-entry tables in immediates),
// 4 permutes interleave them into bf16 pairs, 7 shifts and ~8 logic ops place the 8 sign bits,
// 4 bf16x2 FMAs apply the scale: ~30 instructions, none of them a conversion, against the e4m3
// path's 4 cvt (fp8x2 -> f16x2), 8 cvt (f16 -> f32), 8 FMUL and 4 packs (24). Per 512-value token:
// 64 chunks, ~1,900 instructions (e4m3: ~1,540), plus each chunk's scale decode (e4m3_scale_bf16x2:
// 3 cvt + 1 pack; ue8m0: 2 integer ops).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/device/e2m1_bf16.h"
#include "cuda/device/ptx/mma.cuh"

namespace sparse_mla::cuda {

// An e4m3 scale byte -> fp32 (exact: e4m3 -> f16 -> fp32), NaN for 0x7f / 0xff.
__device__ __forceinline__ float e4m3_scale_to_float(uint32_t byte) {
  const __half_raw h =
      __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte & 0xffu), __NV_E4M3);
  return __half2float(__half(h));
}

// a * b + (-0) on bf16 pairs, rounded to nearest even (sm_80's bf16 multiply; exact here).
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
  return d;
}

// Eight e2m1 codes times `scale2` (the tile's scale as a bf16 pair, both halves equal).
__device__ __forceinline__ uint4 dequant_e2m1x8(uint32_t codes, uint32_t scale2) {
  const E2m1Bf16x8 v = e2m1x8_to_bf16(codes);
  return uint4{bf16x2_mul(v.x, scale2), bf16x2_mul(v.y, scale2), bf16x2_mul(v.z, scale2),
               bf16x2_mul(v.w, scale2)};
}

// An e4m3 scale byte as a bf16 pair (exact: 4 significant bits).
__device__ __forceinline__ uint32_t e4m3_scale_bf16x2(uint32_t byte) {
  const float s = e4m3_scale_to_float(byte);
  return ptx::pack_bf16x2(s, s);
}

}  // namespace sparse_mla::cuda
