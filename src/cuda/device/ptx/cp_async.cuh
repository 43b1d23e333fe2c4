// cp.async (sm_80+): asynchronous global -> shared copies with zero fill, and their group
// completion. An invalid source is expressed as src_size 0 (16 zero bytes are written); callers
// still pass an in-bounds address (clamped row), so nothing outside the tensor is ever named.
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

// 16 bytes, L2 only (.cg), with a 256-B L2 prefetch hint (whole gathered rows are read).
// src_bytes: 16 = copy, 0 = write 16 zero bytes.
__device__ __forceinline__ void cp_async_cg_16(uint32_t smem_addr, const void* gmem,
                                               uint32_t src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n"
               :
               : "r"(smem_addr), "l"(gmem), "r"(src_bytes)
               : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// 8 bytes through L1 (.ca is the only form below 16 B); used for the v4 per-token scale rows.
__device__ __forceinline__ void cp_async_ca_8(uint32_t smem_addr, const void* gmem,
                                              uint32_t src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
               :
               : "r"(smem_addr), "l"(gmem), "r"(src_bytes)
               : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// A hint: brings the 32-B sector of `gmem` into L2 without waiting (prefetch.global.L2), for a
// load that follows later.
__device__ __forceinline__ void prefetch_l2(const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
#endif
}

// A hint: brings `bytes` (a multiple of 16) from 16-B aligned `gmem` into L2 without waiting, in
// one instruction (cp.async.bulk.prefetch.L2, sm_90): a whole gathered row fetched ahead of its
// copy.
__device__ __forceinline__ void prefetch_l2_bulk(const void* gmem, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(gmem), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace sparse_mla::cuda::ptx
