// The consumer warpgroups of the Hopper decode's block schedule (block_config.cuh), per piece of
// 64 heads x its blocks, one 64-key block at a time (buffer = the CTA's block count % 2):
//   WG0  S = Q K^T over the whole block -> mask, lazy running max, P = 2^(S - m) -> (once WG1 is
//        done with the previous P) P and the rows' alpha into shared memory (p_full) -> O_L *=
//        alpha, O_L += P V_L from registers, with the next block's scores queued behind it on the
//        tensor cores -> the buffer released once O_L's products are done;
//   WG1  (p_full) O_R *= alpha, O_R += P V_R from the P tile -> p_empty, the buffer released.
// WG0 alone holds the row statistics (m, l); at the piece's end it publishes them for WG1 and
// both store their 256 columns through the split kernel's row stores.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/wgmma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_decode/piece_target.cuh"
#include "cuda/sm90a/seesaw/consumers.cuh"
#include "cuda/sm90a/sparse_decode/block_config.cuh"
#include "cuda/sm90a/sparse_decode/kernel.cuh"  // Piece

namespace sparse_mla::cuda::sm90a_block_decode {

using sm90a::ConsumerPlace;

// The P fragments stay in their registers until the RS products that read them are done: an
// empty asm that "writes" them after the wait, so the compiler cannot reuse the registers while
// the asynchronous wgmma may still read them.
__device__ __forceinline__ void keep_fragments(uint32_t (&p)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(p[i][j])::"memory");
  }
}

// One consumer warp is done with a buffer: an arrival on this CTA's empty barrier and, paired,
// on the peer's (its producer writes into this CTA's buffer too).
template <bool kPaired>
__device__ __forceinline__ void release_buffer(uint64_t& empty, uint32_t peer_empty,
                                               const ConsumerPlace& at) {
  __syncwarp();
  if (at.lane == 0) {
    ptx::mbarrier_arrive(smem_u32(&empty));
    if constexpr (kPaired) ptx::mbarrier_arrive_remote(peer_empty);
  }
}

// S = Q K^T over all d_qk / 64 panels of the buffer `kv`, issued (not waited for).
template <int kDqk>
__device__ __forceinline__ void issue_block_scores(uint32_t q, uint32_t kv, float (&s)[32]) {
  ptx::wgmma_fence_operands(s);
  ptx::wgmma_fence();
  sm90a::issue_score_panels<0, kDqk / 64, true>(q, kv, s);
  ptx::wgmma_commit_group();
}

// The barriers' phases of the CTA's block `n` (counted over its pieces): buffer n % 2 in its
// (n / 2)-th use; the P tile in its n-th.
struct BlockPhase {
  int buffer;
  uint32_t full_parity, p_parity;
  __device__ __forceinline__ explicit BlockPhase(uint32_t n)
      : buffer(static_cast<int>(n & 1)), full_parity((n >> 1) & 1), p_parity(n & 1) {}
};

// WG0 over one piece of num_blocks blocks from the CTA's block `first_block` on; Q at phase
// `item` of q_full. m and l hold the rows' running max (log2) and this thread's share of the sum.
template <int kDqk, bool kPaired>
__device__ __forceinline__ void score_piece(BlockSmem<kDqk>& sm, uint32_t peer_empty,
                                            const ConsumerPlace& at, float scale_log2,
                                            int num_blocks, uint32_t first_block, uint32_t item,
                                            float (&m)[2], float (&l)[2], float (&o)[128]) {
  const uint32_t q = smem_u32(sm.q);
  ptx::mbarrier_wait_parity(smem_u32(&sm.q_full), item & 1);
  if (num_blocks == 0) {
    sm90a::release(sm.q_empty, at);
    return;
  }
  float s[32];
  {
    const BlockPhase first(first_block);
    ptx::mbarrier_wait_parity(smem_u32(&sm.full[first.buffer]), first.full_parity);
    issue_block_scores<kDqk>(q, smem_u32(sm.kv[first.buffer]), s);
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operands(s);
  }
  for (int i = 0; i < num_blocks; ++i) {
    const uint32_t n = first_block + i;
    const BlockPhase at_block(n);
    const bool has_next = i + 1 < num_blocks;
    if (!has_next) sm90a::release(sm.q_empty, at);  // the piece's last scores are done
    float mx[2], m_use[2], alpha[2];
    sm90a::mask_scores(sm.valid[at_block.buffer], at, scale_log2, s, mx);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RunningMaxStep step = advance_running_max_lazy(m[h], mx[h]);
      m_use[h] = step.m_use;
      alpha[h] = step.alpha;
      l[h] *= alpha[h];
    }
    uint32_t p[4][4];
    sm90a::exponentiate(s, m_use, l, p);
    // WG1 is done with the previous block's P and alpha.
    if (n > 0) ptx::mbarrier_wait_parity(smem_u32(&sm.p_empty), (n - 1) & 1);
    if ((at.lane & 3) == 0) {
      sm.alpha[at.row[0]] = alpha[0];
      sm.alpha[at.row[1]] = alpha[1];
    }
    sm90a::store_p(sm.p, at, p);  // ends with the async-proxy fence
    ptx::mbarrier_arrive(smem_u32(&sm.p_full));
    sm90a::rescale(alpha, o);
    const uint32_t kv = smem_u32(sm.kv[at_block.buffer]);
    sm90a::issue_products_rs(kv, 0, p, o);
    if (has_next) {
      const BlockPhase next(n + 1);
      ptx::mbarrier_wait_parity(smem_u32(&sm.full[next.buffer]), next.full_parity);
      issue_block_scores<kDqk>(q, smem_u32(sm.kv[next.buffer]), s);
      ptx::wgmma_wait_group<1>();
      ptx::wgmma_fence_operands(o);
      keep_fragments(p);
      release_buffer<kPaired>(sm.empty[at_block.buffer], peer_empty + 8 * at_block.buffer, at);
      ptx::wgmma_wait_group<0>();
      ptx::wgmma_fence_operands(s);
    } else {
      ptx::wgmma_wait_group<0>();
      ptx::wgmma_fence_operands(o);
      keep_fragments(p);
      release_buffer<kPaired>(sm.empty[at_block.buffer], peer_empty + 8 * at_block.buffer, at);
    }
  }
}

// WG1 over the same piece: per block O_R *= alpha, O_R += P V_R (P from the tile WG0 wrote).
template <int kDqk, bool kPaired>
__device__ __forceinline__ void product_piece(BlockSmem<kDqk>& sm, uint32_t peer_empty,
                                              const ConsumerPlace& at, int num_blocks,
                                              uint32_t first_block, float (&o)[128]) {
  const uint64_t desc_p = ptx::wgmma_desc_sw128(smem_u32(sm.p), 16, 1024);
  for (int i = 0; i < num_blocks; ++i) {
    const BlockPhase at_block(first_block + i);
    // Landed (WG0 scored it before it published P); waited for here too, so that this
    // warpgroup's wgmma reads are ordered after the producer's stores by its own acquire.
    ptx::mbarrier_wait_parity(smem_u32(&sm.full[at_block.buffer]), at_block.full_parity);
    ptx::mbarrier_wait_parity(smem_u32(&sm.p_full), at_block.p_parity);
    const float alpha[2] = {sm.alpha[at.row[0]], sm.alpha[at.row[1]]};
    sm90a::rescale(alpha, o);
    const uint64_t desc_v = sm90a::value_desc(smem_u32(sm.kv[at_block.buffer]), 1);
    ptx::wgmma_fence_operands(o);
    ptx::wgmma_fence();
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      ptx::wgmma_m64n256k16_ss<1>(o, desc_p + ((32 * step) >> 4), desc_v + ((16 * step * 128) >> 4),
                                  true);
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operands(o);
    ptx::mbarrier_arrive(smem_u32(&sm.p_empty));
    release_buffer<kPaired>(sm.empty[at_block.buffer], peer_empty + 8 * at_block.buffer, at);
  }
}

// The piece's output: WG0's m and quad-summed l to row_stats[item % 2] (two buffers: WG1 reads one
// piece's while WG0 may already write the next's; the piece after that writes it only after the
// next barrier, which WG1 reaches after its reads), the barrier, then each warpgroup's 256 columns
// through portable_decode's row stores (an unsplit query's bf16 out with the sink and lse, or a
// split piece's fp32 partial and log2 lse).
__device__ __forceinline__ void store_block_piece(const portable_decode::DecodeLaunch& launch,
                                                  const sm90a_decode::Piece& w, int32_t slot,
                                                  int head0, const ConsumerPlace& at,
                                                  float (&row_stats)[2][kHeadRows], float (&m)[2],
                                                  float (&l)[2], float (&o)[128]) {
  if (at.wg == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] = quad_sum(l[h]);
      if ((at.lane & 3) == 0) {
        row_stats[0][at.row[h]] = m[h];
        row_stats[1][at.row[h]] = l[h];
      }
    }
  }
  ptx::named_barrier_sync(kRowStatsReady, kConsumerThreads);
  const portable_decode::PieceTarget to{&launch, w.b, w.s, slot, head0};
  const auto& slices = *reinterpret_cast<const float(*)[32][4]>(&o);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = head0 + at.row[h];
    if (head >= launch.p.problem.h_q) continue;
    const float scale =
        portable_decode::finish_row(to, head, row_stats[0][at.row[h]], row_stats[1][at.row[h]],
                                    at.wg == 0 && (at.lane & 3) == 0);
    portable_decode::store_row<32>(to, head, 256 * at.wg + 2 * (at.lane & 3), slices, 2 * h, scale);
  }
}

// Warpgroup kWg's loop over the CTA's pieces. kWg is a template argument so that each warpgroup's
// register region (setmaxnreg) holds only its own code.
template <class Traits, bool kPaired, int kWg>
__device__ __forceinline__ void consume(const portable_decode::DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int head0, int t,
                                        BlockSmem<Traits::kDqk>& sm) {
  constexpr int kDqk = Traits::kDqk;
  const detail::DecodeParams& p = launch.p;
  const ConsumerPlace at(t);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t peer_empty =
      kPaired ? ptx::map_shared_to_rank(smem_u32(&sm.empty[0]), ptx::cluster_ctarank() ^ 1u) : 0u;
  uint32_t block_count = 0;  // as the producer's
  uint32_t item = 0;
  for (int32_t query = part.begin_query; query <= part.end_query; ++query, ++item) {
    const sm90a_decode::Piece w(p, part, query);
    const int num_blocks = w.end > w.begin ? w.end - w.begin : 0;
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    if constexpr (kWg == 0) {
      score_piece<kDqk, kPaired>(sm, peer_empty, at, scale_log2, num_blocks, block_count, item, m,
                                 l, o);
    } else {
      product_piece<kDqk, kPaired>(sm, peer_empty, at, num_blocks, block_count, o);
    }
    block_count += static_cast<uint32_t>(num_blocks);
    store_block_piece(launch, w, planning::piece_partial_slot(part, query, launch.split_offsets),
                      head0, at, sm.row_stats[item & 1], m, l, o);
  }
}

}  // namespace sparse_mla::cuda::sm90a_block_decode
