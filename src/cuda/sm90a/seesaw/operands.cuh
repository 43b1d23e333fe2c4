// The element types of the seesaw consumers' MMA operands (seesaw/consumers.cuh), a policy the
// kernel picks:
//   Bf16Operands    every panel of Q and the ring, and P, in bf16 (the prefill, the decode over
//                   bf16 and v32_fp8 caches);
//   F16NopeOperands the quantised panels [0, kF16Panels) of Q and the ring in f16 and the rest
//                   (the RoPE panel) in bf16; P in f16 for the f16 value panels and in bf16 for
//                   the bf16 one (the decode over v4_fp8, docs/kernels/sm90a_sparse_decode.md:
//                   e4m3 -> f16 is exact and one instruction per two values, and v4_fp8's
//                   power-of-two scale is one exact f16 multiply, where bf16 needs four
//                   instructions per two values).
// The f16 operands are scaled by powers of two into f16's range: Q's rows by 2^kq (the producer,
// per work item; sm.q_scale holds 2^-kq per row) and a block's keys by 2^c (its converting
// warpgroup; sm.kv_scale holds 2^-c per stage). S is scaled back in fp32 (one multiply per
// score, folded into the softmax scale), and a block's P is multiplied by 2^-c before it is
// rounded, so that P V' = P V.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/ptx/wgmma.cuh"

namespace sparse_mla::cuda::sm90a {

struct Bf16Operands {
  static constexpr bool kF16 = false;
  static constexpr int kF16Panels = 0;
  // P's pair (lo, hi) as the value MMA's operand, and back to fp32.
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    return ptx::pack_bf16x2(lo, hi);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t bits) {
    return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
  }
};

// Seven f16 panels (v4_fp8: 448 quantised dims) and the bf16 RoPE panel, d_qk 512. WG0's output
// columns (panels 0-3) are all f16; WG1's (panels 4-7) are three f16 panels (one m64n192 MMA per
// k-step) and the bf16 panel (one m64n64).
struct F16NopeOperands {
  static constexpr bool kF16 = true;
  static constexpr int kF16Panels = 7;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t bits) {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
};

// The element type of panel `panel`'s MMAs under Ops.
template <class Ops>
__device__ __forceinline__ constexpr ptx::MmaInput panel_input(int panel) {
  return panel < Ops::kF16Panels ? ptx::MmaInput::kF16 : ptx::MmaInput::kBf16;
}

}  // namespace sparse_mla::cuda::sm90a
