// The Hopper decode's block schedule (block_config.cuh: FlashMLA's decode schedule and, at two
// head groups, its 2-CTA crossover): the kernel and its launch. Same inputs (DecodeLaunch: the
// split schedule of 64-key blocks, partial slots, combine) as the seesaw decode (kernel.cuh);
// SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1 picks it for the FP8 caches (launch.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/grid_dependency.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "cuda/runtime/pair_launch.h"
#include "cuda/sm90a/sparse_decode/block_config.cuh"
#include "cuda/sm90a/sparse_decode/block_consumers.cuh"
#include "cuda/sm90a/sparse_decode/block_producer.cuh"

namespace sparse_mla::cuda::sm90a_block_decode {

template <class Traits, bool kPaired>
__global__ void __launch_bounds__(kThreads, 1)
    sm90a_block_decode_kernel(const portable_decode::DecodeLaunch launch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kDqk = Traits::kDqk;
  extern __shared__ uint8_t smem_raw[];
  auto& sm =
      *reinterpret_cast<BlockSmem<kDqk>*>(smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023));
  if (threadIdx.x == 0) {
    // Buffer released by every consumer warp of the cluster's CTAs (paired: each arrives on its
    // own CTA's barrier and on the peer's).
    constexpr uint32_t kEmptyArrivals = (kConsumerThreads / 32) * (kPaired ? 2 : 1);
    for (int b = 0; b < 2; ++b) {
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.full[b]), kProducerThreads);
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.empty[b]), kEmptyArrivals);
    }
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.p_full), kConsumerThreads / 2);
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.p_empty), kConsumerThreads / 2);
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.q_full), kProducerThreads);
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.q_empty), kConsumerThreads / 2 / 32);
  }
  // Paired: both CTAs' barriers are initialised before any remote arrival or st.async names them.
  if constexpr (kPaired) {
    ptx::cluster_sync();
  } else {
    __syncthreads();
  }
  const int thread = threadIdx.x;
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int head0 = static_cast<int>(blockIdx.y) * kHeadRows;
  // As the seesaw decode (kernel.cuh): the combine may launch now where this grid is one wave.
  // Not paired: a second wave of clusters could wait for SMs that waiting combine CTAs hold.
  if (!kPaired && gridDim.x * gridDim.y <= ptx::sm_count()) ptx::launch_dependents();
  if (thread >= kConsumerThreads) {
    ptx::setmaxnreg_dec<kProducerRegs>();
    produce<Traits, kPaired>(launch, part, head0, thread - kConsumerThreads, sm);
  } else if (thread >= kConsumerThreads / 2) {
    ptx::setmaxnreg_dec<kProductRegs>();
    consume<Traits, kPaired, 1>(launch, part, head0, thread, sm);
  } else {
    ptx::setmaxnreg_inc<kScorerRegs>();
    consume<Traits, kPaired, 0>(launch, part, head0, thread, sm);
  }
  // Paired: neither CTA leaves while its peer may still arrive on its barriers.
  if constexpr (kPaired) ptx::cluster_sync();
#else
  __trap();
#endif
}

template <int kDqk>
inline constexpr int kBlockDecodeSmemBytes = static_cast<int>(sizeof(BlockSmem<kDqk>)) + 1024;

// Launches on `stream`: grid (parts, head groups); two head groups as 2-CTA clusters.
template <KvCacheFormat kFormat, int kDqk>
Status launch_sm90a_block_decode(const portable_decode::DecodeLaunch& launch, cudaStream_t stream) {
  using Traits = KvTraits<kFormat, kDqk>;
  const int head_groups = static_cast<int>((launch.p.problem.h_q + kHeadRows - 1) / kHeadRows);
  constexpr int smem = kBlockDecodeSmemBytes<kDqk>;
  if (head_groups == 2) {
    auto kernel = sm90a_block_decode_kernel<Traits, true>;
    SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config =
        pair_launch_config(launch.num_parts, kThreads, smem, stream, &cluster);
    SMLA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, launch));
  } else {
    auto kernel = sm90a_block_decode_kernel<Traits, false>;
    SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
    const dim3 grid(static_cast<unsigned>(launch.num_parts), static_cast<unsigned>(head_groups));
    kernel<<<grid, kThreads, smem, stream>>>(launch);
  }
  return check_last_launch("sm90a_block_decode_kernel");
}

}  // namespace sparse_mla::cuda::sm90a_block_decode
