// Thread-block clusters and distributed shared memory (sm_90+): the rank of this CTA in its
// cluster, the shared::cluster address of a variable in another CTA of the cluster, 16-B stores
// into it, and the cluster-wide barrier (cuda-techniques.md §6). Code compiled for an older
// architecture traps: the host launches cluster kernels only where the loaded code is sm_90+
// (cudaFuncAttributes::ptxVersion >= 90).
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
  return rank;
}

// The shared::cluster address of the byte at shared::cta address `smem_addr` in CTA `rank`.
__device__ __forceinline__ uint32_t map_shared_to_rank(uint32_t smem_addr, uint32_t rank) {
  uint32_t remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr), "r"(rank));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
  return remote;
}

// 16 bytes to a shared::cluster address (this CTA's or a peer's shared memory).
__device__ __forceinline__ void st_shared_cluster_16(uint32_t cluster_addr, uint4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};\n"
               :
               : "r"(cluster_addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Every thread of every CTA of the cluster arrives, then waits for all: the writes a thread made
// before it (to its own or a peer's shared memory) are visible to every thread of the cluster
// after it. Also a CTA-wide barrier.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace sparse_mla::cuda::ptx
