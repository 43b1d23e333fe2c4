// Thread-block clusters and distributed shared memory (sm_90+): the rank of this CTA in its
// cluster, the shared::cluster address of a variable in another CTA of the cluster, 16-B
// st.async stores into it counted on its mbarrier (init, arrive.expect_tx, parity wait), and the
// cluster-wide barriers, fenced and relaxed (cuda-techniques.md §6). Code compiled for an older
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

// 16 bytes to a peer CTA's shared memory (shared::cluster address) that also count as 16
// transaction bytes on the mbarrier `peer_barrier` (shared::cluster address, in the same CTA as
// the destination): the receiver waits on its own barrier instead of a fenced cluster barrier.
__device__ __forceinline__ void st_async_16(uint32_t cluster_addr, uint4 v, uint32_t peer_barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n"
      :
      : "r"(cluster_addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(peer_barrier)
      : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// mbarrier (shared::cta address): init with `count` arrivals, made visible to the cluster.
__device__ __forceinline__ void mbarrier_init_for_cluster(uint32_t barrier, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n"
      "fence.mbarrier_init.release.cluster;\n" ::"r"(barrier),
      "r"(count)
      : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// One arrival on `barrier` (shared::cta) that also expects `bytes` transaction bytes this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Waits until the phase of `barrier` (shared::cta) with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t barrier, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, 0x989680;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// A cluster barrier without release semantics: every thread of the cluster arrives and waits,
// but writes made before it are not published by it (no MEMBAR / ERRBAR). Enough to say "I have
// finished reading": a read whose value an earlier instruction already consumed is complete.
__device__ __forceinline__ void cluster_sync_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "barrier.cluster.arrive.relaxed.aligned;\n"
      "barrier.cluster.wait.aligned;\n" ::
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
