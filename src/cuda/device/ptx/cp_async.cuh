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

// L2 eviction policies (sm_80+) for the cache_hint forms: evict_first for data read or written
// once (streamed query and output rows), evict_last for data that other CTAs read again
// (gathered KV rows).
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

// cp_async_cg_16 with an L2 eviction policy (l2_policy_*).
__device__ __forceinline__ void cp_async_cg_16_hint(uint32_t smem_addr, const void* gmem,
                                                    uint32_t src_bytes, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n"
               :
               : "r"(smem_addr), "l"(gmem), "r"(src_bytes), "l"(policy)
               : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// A 4-byte global store with an L2 eviction policy.
__device__ __forceinline__ void st_global_b32_hint(void* gmem, uint32_t value, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;\n" ::"l"(gmem), "r"(value), "l"(policy)
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
