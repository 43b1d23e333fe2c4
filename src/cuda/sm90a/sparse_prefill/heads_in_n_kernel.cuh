// The heads-in-N Hopper prefill kernel (sm90a/heads_in_n/config.cuh;
// SMLA_PREFILL_SM90A_HEADS_IN_N=1, 1..32 heads): the seesaw prefill's persistent grid, work items
// and producer (kernel.cuh) with consumers that put the heads in the wgmma N dimension
// (sm90a/heads_in_n/consumers.cuh). A work item is one query token (one head group of N = 16 or
// 32): WG0 takes the blocks in ring stage 0, WG1 those in stage 1, the two merge at the item's end
// and each stores half of the output dims; WG0 writes lse and max_logits.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/sm90a/heads_in_n/config.cuh"
#include "cuda/sm90a/heads_in_n/consumers.cuh"
#include "cuda/sm90a/seesaw/cta.cuh"
#include "cuda/sm90a/sparse_prefill/kernel.cuh"

namespace sparse_mla::cuda::sm90a_prefill {

// The warpgroup's half of the token's merged output (`keep`: panels [4 wg, 4 wg + 4)): out in
// bf16 with the sink, through shared memory in 16-B stores (store_bf16_heads); lse and max_logits
// in natural log by WG0's lanes that hold every head once (+inf / -inf and out 0 for a head
// without a valid slot).
template <int kN, class SmemT>
__device__ __forceinline__ void store_transposed_item(
    const detail::PrefillParams& p, int64_t token, int head0, const ColumnPlace& at, SmemT& sm,
    const float (&o)[kLeftPanels][kN / 2], const float (&m)[HeadsInN<kN>::kColumns],
    const float (&l)[HeadsInN<kN>::kColumns], const float (&true_max)[HeadsInN<kN>::kColumns]) {
  constexpr int kColumns = HeadsInN<kN>::kColumns;
  const int heads = static_cast<int>(p.problem.h_q) - head0;
  const bool writes_rows = at.wg == 0 && at.warp == 0 && at.lane < 4;  // every head once
  float scale[kColumns];
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    const int h = at.head(j);
    const int head = head0 + h;
    const bool live = h < heads;
    const bool empty = !(l[j] > 0.0f);
    scale[j] = 0.0f;
    if (live && !empty) {
      const float* sink =
          p.attn_sink != nullptr ? p.attn_sink + head * p.attn_sink_stride : nullptr;
      scale[j] = output_scale(m[j], l[j], sink);
    }
    if (live && writes_rows) {
      p.lse[token * p.lse_stride_s + head * p.lse_stride_h] =
          empty ? INFINITY : (m[j] + log2f(l[j])) * kLn2;
      p.max_logits[token * p.max_logits_stride_s + head * p.max_logits_stride_h] =
          empty ? -INFINITY : true_max[j] * kLn2;
    }
  }
  uint16_t* out = p.out + token * p.out_stride_s + static_cast<int64_t>(head0) * p.out_stride_h +
                  64 * kLeftPanels * at.wg;
  if (at.wg == 0) {
    store_bf16_heads<kN, 0>(reinterpret_cast<uint8_t*>(sm.merge[1]), at, o, scale, heads, out,
                            p.out_stride_h);
  } else {
    store_bf16_heads<kN, 1>(reinterpret_cast<uint8_t*>(sm.merge[0]), at, o, scale, heads, out,
                            p.out_stride_h);
  }
}

template <int kDqk, int kN>
__device__ __forceinline__ void consume_heads_in_n(const detail::PrefillParams& p, int head_groups,
                                                   int64_t num_items, int t,
                                                   HeadsInNSmem<kDqk, kN>& sm) {
  const ColumnPlace at(t);
  const float scale_log2 = p.sm_scale * kLog2e;
  const uint32_t q = smem_u32(sm.q);
  uint32_t ring_pairs = 0;  // as the producer's
  uint32_t item_count = 0;
  for (int64_t item = blockIdx.x; item < num_items; item += gridDim.x, ++item_count) {
    const WorkItem w(p, head_groups, item);
    float o[kValuePanels][kN / 2];
    ColumnState<kN> st;
    consume_item_blocks<kDqk, kN>(q, sm, at, scale_log2, w.num_pairs, ring_pairs, item_count, st,
                                  o);
    ring_pairs += w.num_pairs;
    float keep[kLeftPanels][kN / 2], m[HeadsInN<kN>::kColumns], l[HeadsInN<kN>::kColumns],
        true_max[HeadsInN<kN>::kColumns];
    merge_warpgroups<kN>(sm, at, st, o, keep, m, l, true_max);
    store_transposed_item<kN>(p, w.token, w.head0, at, sm, keep, m, l, true_max);
  }
}

template <int kDqk, int kN>
__global__ void __launch_bounds__(kThreads, 1)
    sm90a_heads_in_n_prefill_kernel(const detail::PrefillParams p, int64_t num_items) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using SmemT = HeadsInNSmem<kDqk, kN>;
  extern __shared__ uint8_t smem_raw[];
  SmemT& sm = set_up_ring_cta<SmemT>(smem_raw, kFullArrivals);
  const int thread = threadIdx.x;
  // One head group: the items are the tokens (WorkItem's head0 is 0).
  if (thread >= kConsumerThreads) {
    ptx::setmaxnreg_dec<kProducerRegs>();
    produce<kDqk>(p, 1, num_items, thread - kConsumerThreads, sm);
  } else {
    ptx::setmaxnreg_inc<kConsumerRegs>();
    consume_heads_in_n<kDqk, kN>(p, 1, num_items, thread, sm);
  }
#else
  __trap();
#endif
}

// Heads per CTA for h_q <= 32: 16 or 32 in N.
inline int prefill_heads_in_n_for(int64_t h_q) { return h_q <= 16 ? 16 : 32; }

template <int kDqk, int kN>
Status launch_heads_in_n_prefill(const detail::PrefillParams& p, cudaStream_t stream) {
  const int64_t num_items = p.problem.s_q;
  int64_t grid;
  SMLA_RETURN_IF_ERROR(persistent_prefill_grid(p, num_items, &grid));
  if (grid == 0) return {};
  constexpr int smem = static_cast<int>(sizeof(HeadsInNSmem<kDqk, kN>)) + 1024;
  const auto kernel = sm90a_heads_in_n_prefill_kernel<kDqk, kN>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, num_items);
  return check_last_launch("sm90a_heads_in_n_prefill_kernel");
}

}  // namespace sparse_mla::cuda::sm90a_prefill
