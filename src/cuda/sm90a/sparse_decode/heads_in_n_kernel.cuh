// The heads-in-N Hopper decode kernel (sm90a/heads_in_n/config.cuh; SMLA_DECODE_SM90A_HEADS_IN_N=1,
// 1..32 heads): the seesaw decode's grid, schedule, producer and conversion (kernel.cuh) with
// consumers that put the heads in the wgmma N dimension (sm90a/heads_in_n/consumers.cuh). Grid
// (parts, 1): CTA `part` walks its pieces; per piece WG0 takes the blocks in ring stage 0 and WG1
// those in stage 1, the two merge at the piece's end and each stores half of the output dims.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/portable/sparse_decode/piece_target.cuh"
#include "cuda/sm90a/heads_in_n/config.cuh"
#include "cuda/sm90a/heads_in_n/consumers.cuh"
#include "cuda/sm90a/seesaw/cta.cuh"
#include "cuda/sm90a/sparse_decode/kernel.cuh"

namespace sparse_mla::cuda::sm90a_decode {

// The warpgroup's half of the merged output (`keep`: panels [4 wg, 4 wg + 4)) through the split
// kernel's targets (portable_decode::PieceTarget): an unsplit query's bf16 out with the sink and
// its lse (through shared memory in 16-B stores, store_bf16_heads), or a split piece's fp32
// partial normalised by its sum and its log2 lse (each element its own 4-B store: a warp's store
// instruction fills four whole 32-B sectors).
template <int kN, class SmemT>
__device__ __forceinline__ void store_transposed_piece(const DecodeLaunch& launch, const Piece& w,
                                                       int32_t slot, int head0,
                                                       const ColumnPlace& at, SmemT& sm,
                                                       const float (&o)[kLeftPanels][kN / 2],
                                                       const float (&m)[HeadsInN<kN>::kColumns],
                                                       const float (&l)[HeadsInN<kN>::kColumns]) {
  constexpr int kColumns = HeadsInN<kN>::kColumns;
  const detail::DecodeParams& p = launch.p;
  const portable_decode::PieceTarget to{&launch, w.b, w.s, slot, head0};
  const int heads = static_cast<int>(p.problem.h_q) - head0;
  const bool writes_lse = at.wg == 0 && at.warp == 0 && at.lane < 4;  // every head once
  float scale[kColumns];
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    const int h = at.head(j);
    scale[j] =
        h < heads ? portable_decode::finish_row(to, head0 + h, m[j], l[j], writes_lse) : 0.0f;
  }
  const int first_dim = 64 * kLeftPanels * at.wg;
  if (slot < 0) {
    uint16_t* out =
        p.out + w.b * p.out_stride_b + w.s * p.out_stride_s + head0 * p.out_stride_h + first_dim;
    if (at.wg == 0) {
      store_bf16_heads<kN, 0>(reinterpret_cast<uint8_t*>(sm.merge[1]), at, o, scale, heads, out,
                              p.out_stride_h);
    } else {
      store_bf16_heads<kN, 1>(reinterpret_cast<uint8_t*>(sm.merge[0]), at, o, scale, heads, out,
                              p.out_stride_h);
    }
    return;
  }
  float* partial =
      launch.partial_out + (static_cast<int64_t>(slot) * p.problem.h_q + head0) * 512 + first_dim;
#pragma unroll
  for (int k = 0; k < kLeftPanels; ++k) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const int h = at.head(column_of(i));
      if (h < heads) {
        partial[h * 512 + 64 * k + at.row[(i >> 1) & 1]] = o[k][i] * scale[column_of(i)];
      }
    }
  }
}

template <class Traits, int kN>
__device__ __forceinline__ void consume_heads_in_n(const DecodeLaunch& launch,
                                                   const planning::DecodePartSchedule& part,
                                                   int head0, int t,
                                                   HeadsInNSmem<Traits::kDqk, kN>& sm) {
  constexpr int kDqk = Traits::kDqk;
  using Prepare = ScorerPrepare<Traits>;
  const detail::DecodeParams& p = launch.p;
  const ColumnPlace at(t);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t q = smem_u32(sm.q);
  uint32_t ring_pairs = 0;  // as the producer's
  uint32_t item_count = 0;
  for (int32_t query = part.begin_query; query <= part.end_query; ++query, ++item_count) {
    const Piece w(p, part, query);
    float o[kValuePanels][kN / 2];
    ColumnState<kN> st;
    consume_item_blocks<kDqk, kN, Prepare>(q, sm, at, scale_log2, w.num_pairs, ring_pairs,
                                           item_count, st, o);
    ring_pairs += w.num_pairs;
    float keep[kLeftPanels][kN / 2], m[HeadsInN<kN>::kColumns], l[HeadsInN<kN>::kColumns],
        unused_max[HeadsInN<kN>::kColumns];
    merge_warpgroups<kN, false>(sm, at, st, o, keep, m, l, unused_max);
    store_transposed_piece<kN>(launch, w,
                               planning::piece_partial_slot(part, query, launch.split_offsets),
                               head0, at, sm, keep, m, l);
  }
}

template <class Traits, int kN>
__global__ void __launch_bounds__(kThreads, 1)
    sm90a_heads_in_n_decode_kernel(const DecodeLaunch launch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using SmemT = HeadsInNSmem<Traits::kDqk, kN>;
  extern __shared__ uint8_t smem_raw[];
  SmemT& sm = set_up_ring_cta<SmemT>(smem_raw, kFullArrivals);
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int head0 = static_cast<int>(blockIdx.y) * kN;
  run_decode_roles([&](int t) { produce<Traits>(launch, part, head0, t, sm); },
                   [&](int t) { consume_heads_in_n<Traits, kN>(launch, part, head0, t, sm); });
#else
  __trap();
#endif
}

// Heads per CTA for h_q <= 32: 16 or 32 in N.
inline int heads_in_n_for(int64_t h_q) { return h_q <= 16 ? 16 : 32; }

template <KvCacheFormat kFormat, int kDqk, int kN>
Status launch_heads_in_n_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  using Traits = KvTraits<kFormat, kDqk>;
  constexpr int smem = static_cast<int>(sizeof(HeadsInNSmem<kDqk, kN>)) + 1024;
  const auto kernel = sm90a_heads_in_n_decode_kernel<Traits, kN>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  const int head_groups = static_cast<int>((launch.p.problem.h_q + kN - 1) / kN);
  const dim3 grid(static_cast<unsigned>(launch.num_parts), static_cast<unsigned>(head_groups));
  kernel<<<grid, kThreads, smem, stream>>>(launch);
  return check_last_launch("sm90a_heads_in_n_decode_kernel");
}

}  // namespace sparse_mla::cuda::sm90a_decode
