// ldmatrix.sync.aligned.m8n8.{x4,x2}{.trans}.shared.b16: four (two) 8x8 b16 matrices from shared
// memory into mma.sync fragments. Lanes 8i..8i+7 supply the 16-B row addresses of matrix i; the
// kernels' address recipes are in src/cuda/portable/common/tile_mma.cuh.
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

// smem_addr: a 32-bit shared-state-space address (__cvta_generic_to_shared), 16-B aligned.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Two matrices: lanes 0..15 supply the row addresses (the other lanes' are ignored).
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace sparse_mla::cuda::ptx
