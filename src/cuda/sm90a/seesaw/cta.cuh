// The seesaw CTA's set-up (seesaw/config.cuh): its shared-memory plan placed on a 1 KiB boundary
// and its mbarriers initialised, the same in every kernel with the seesaw's ring.
#pragma once

#include <cstdint>

#include "cuda/device/ptx/cluster.cuh"  // mbarrier init
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a {

// A plan SmemT (the seesaw's Smem, or a kernel's own with the same ring, barriers and Q barriers)
// in dynamic shared memory `smem_raw` (sized SmemT + 1 KiB): wgmma's 128-B swizzle is computed
// from address bits, so tiles must sit on 1 KiB boundaries. Thread 0 initialises the barriers
// (full: `full_arrivals`, the kernel's producer; q_full: the producer's 128 cp.async arrivals;
// empty and q_empty: the consumers' warps); every thread passes the CTA barrier after.
template <class SmemT>
__device__ __forceinline__ SmemT& set_up_ring_cta(uint8_t* smem_raw, uint32_t full_arrivals) {
  auto& sm = *reinterpret_cast<SmemT*>(smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023));
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2 * kStages; ++s) {
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.full[s]), full_arrivals);
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.empty[s]), kEmptyArrivals);
    }
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.q_full), kProducerThreads);
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.q_empty), kQEmptyArrivals);
  }
  __syncthreads();
  return sm;
}

template <int kDqk>
__device__ __forceinline__ Smem<kDqk>& set_up_seesaw_cta(uint8_t* smem_raw,
                                                         uint32_t full_arrivals) {
  return set_up_ring_cta<Smem<kDqk>>(smem_raw, full_arrivals);
}

}  // namespace sparse_mla::cuda::sm90a
