// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: the warp-level bf16 tensor-core product
// of the portable (sm_80+) kernels. Fragment layouts (g = lane/4, t = lane%4):
//   A 16x16: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8 : b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8 : c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

// d += a * b on one 16x8 fp32 tile. a: 4 x bf16x2, b: 2 x bf16x2, d: 4 x fp32.
__device__ __forceinline__ void mma_m16n8k16_bf16_f32(float (&d)[4], const uint32_t (&a)[4],
                                                      uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
  __trap();  // mma.sync bf16 needs sm_80+: this kernel was launched on an older device
#endif
}

// Packs two fp32 into bf16x2 with round-to-nearest-even; `lo` goes to the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
  return r;
}

// Two bf16 products, rounded to nearest even (mul.rn.bf16x2, sm_90; subnormals kept).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
  return r;
}

}  // namespace sparse_mla::cuda::ptx
