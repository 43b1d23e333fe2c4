// Global-memory operations at GPU scope for hand-offs between CTAs of one grid: a CTA's release
// of results it stored (every thread's stores, ordered before the release by a CTA barrier), and
// another CTA's acquire of them.
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Adds v with release semantics: this thread's earlier writes, and those of the CTA that a
// barrier ordered before it, are visible to whoever acquires the sum.
__device__ __forceinline__ void add_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t add_relaxed_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

__device__ __forceinline__ void store_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

}  // namespace sparse_mla::cuda::ptx
