// The seesaw ring shared by a 2-CTA cluster (the paired launch of 65..128 heads: the two CTAs hold
// the two 64-head halves of the same query and walk the same blocks, so each block's rows are
// gathered once per cluster instead of once per CTA). Per half-stage, the producer of CTA k
// (rank k = its head group) loads rows 32 k .. 32 k + 31 of the block into registers, waits until
// both CTAs' consumers freed the half-stage (wait_paired_half_free), stores each 16-B chunk into
// its own tile and the peer's (store_chunk_both: st.shared and st.async, the latter counted as
// transaction bytes on the peer's full barrier) and arrives on its own full barrier with the
// peer's bytes expected (publish_paired_half), so the half completes once both CTAs' rows are in.
// The decode (sparse_decode/paired_producer.cuh) converts FP8 rows on the way; a bf16 row is
// stored as it is (PairedBf16Rows, which the prefill and the decode's bf16 caches share).
//
// Thread t of the producer (group g = t / 8, chunk c = t % 8: ProducerPlace) owns rows
// g + 16 (2 k + j), j < 2, of the block, i.e. its entries 2 k and 2 k + 1 of the four it holds for
// the validity flags (rows g + 16 r, r < 4).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/seesaw/config.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"

namespace sparse_mla::cuda::sm90a {

// Full barrier of a half-stage in a 2-CTA cluster: one arrival per producer thread after its
// stores (thread 0's with the peer's transaction bytes).
inline constexpr uint32_t kPairedFullArrivals = kProducerThreads;

// Register caps of a paired kernel after setmaxnreg: 2 x 208 + 88 = 504. The launch holds
// 168 x 384 = 64,512 registers and setmaxnreg.inc gets only what the CTA's .dec released, so the
// sum must stay <= 504 (208 / 208 / 96 and 216 / 216 / 80 hung every paired launch on an H100).
// Its consumers score bf16 halves as they landed (no conversion) and fit 208 without spills
// (cuobjdump: no local memory in the consumers' region at any instantiation); its producer holds
// a half's rows in registers beside the shared::cluster addresses of its st.async stores.
inline constexpr int kPairedConsumerRegs = 208;
inline constexpr int kPairedProducerRegs = 88;

// Panels [kHalfFirstPanel, kHalfEndPanel) of a half-stage: half 0 = panels 0-3, half 1 = the rest.
template <int kDqk, int kHalf>
inline constexpr int kHalfFirstPanel = kHalf* kLeftPanels;
template <int kDqk, int kHalf>
inline constexpr int kHalfEndPanel = kHalf == 0 ? kLeftPanels : kDqk / 64;

// Bytes of a half-stage that one CTA writes into its peer: 32 rows x the half's panels x 128 B.
template <int kDqk, int kHalf>
inline constexpr uint32_t kPeerHalfBytes = 32u * 128u *
                                           (kHalfEndPanel<kDqk, kHalf> -
                                            kHalfFirstPanel<kDqk, kHalf>);

// The peer CTA's ring as this CTA's producer addresses it: shared::cluster addresses of the peer's
// stage 0 tile, full barriers and peer_free barriers (stages and barriers are contiguous, so
// offsets carry over).
struct PeerRing {
  uint32_t rank = 0;  // this CTA's rank in the cluster = its head group
  uint32_t kv = 0, full = 0, peer_free = 0;
  PeerRing() = default;
  template <class SmemT>
  __device__ __forceinline__ explicit PeerRing(SmemT& sm) : rank(ptx::cluster_ctarank()) {
    kv = ptx::map_shared_to_rank(smem_u32(sm.kv[0]), rank ^ 1u);
    full = ptx::map_shared_to_rank(smem_u32(&sm.full[0]), rank ^ 1u);
    peer_free = ptx::map_shared_to_rank(smem_u32(&sm.peer_free[0]), rank ^ 1u);
  }
};

// The paired CTA's set-up beyond set_up_seesaw_cta: the peer_free barriers (one relayed arrival
// each), and a cluster barrier that orders every barrier's initialisation before the peer's first
// remote arrival or st.async.
template <class SmemT>
__device__ __forceinline__ void set_up_paired_ring(SmemT& sm) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2 * kStages; ++s)
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.peer_free[s]), 1);
  }
  ptx::cluster_sync();
}

// Half-stage kIndex (2 stage + half) of ring pair `ring_pair` is free in both CTAs: this CTA's
// consumers released it (empty), which the producer relays to the peer's producer (one remote
// arrival on the peer's peer_free), and the peer's relay came in (its own peer_free).
template <int kIndex, class SmemT>
__device__ __forceinline__ void wait_paired_half_free(SmemT& sm, const PeerRing& peer, int t,
                                                      uint32_t ring_pair) {
  if (ring_pair == 0) return;
  const uint32_t parity = (ring_pair - 1) & 1;
  ptx::mbarrier_wait_parity(smem_u32(&sm.empty[kIndex]), parity);
  if (t == 0) ptx::mbarrier_arrive_remote(peer.peer_free + 8 * kIndex);
  ptx::mbarrier_wait_parity_cluster(smem_u32(&sm.peer_free[kIndex]), parity);
}

// One 16-B chunk at tile offset `offset`: into this CTA's stage tile and the peer's.
__device__ __forceinline__ void store_chunk_both(uint8_t* tile, uint32_t peer_tile,
                                                 uint32_t peer_full, uint32_t offset,
                                                 const uint4& v) {
  *reinterpret_cast<uint4*>(tile + offset) = v;
  ptx::st_async_16(peer_tile + offset, v, peer_full);
}

// The half's chunks are in both tiles: visible to the consumers' wgmma (generic -> async proxy),
// then the arrival on this CTA's full barrier, thread 0's expecting the peer's bytes.
template <int kDqk, int kIndex, class SmemT>
__device__ __forceinline__ void publish_paired_half(SmemT& sm, int t) {
  ptx::fence_proxy_async_shared();
  const uint32_t full = smem_u32(&sm.full[kIndex]);
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(full, kPeerHalfBytes<kDqk, kIndex % 2>);
  } else {
    ptx::mbarrier_arrive(full);
  }
}

__device__ __forceinline__ uint4 load_chunk_if(bool valid, const uint8_t* src) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0u, 0u, 0u, 0u);
}

// A bf16 half-stage's two owned rows in registers: chunk c of each of the half's panels.
template <int kDqk, int kHalf>
struct PairedBf16Rows {
  static constexpr int kFirst = kHalfFirstPanel<kDqk, kHalf>;
  static constexpr int kPanels = kHalfEndPanel<kDqk, kHalf> - kFirst;
  uint4 chunk[2][kPanels];

  // Row j's source (a bf16 row of d_qk values; any address for an invalid row, zeros are stored).
  __device__ __forceinline__ void load(int j, const uint8_t* row, bool valid,
                                       const ProducerPlace& at) {
#pragma unroll
    for (int i = 0; i < kPanels; ++i) {
      chunk[j][i] = load_chunk_if(valid, row + 128 * (kFirst + i) + 16 * at.chunk);
    }
  }

  // Both rows into this CTA's stage tile and the peer's (rows at.group + 32 rank + 16 j).
  __device__ __forceinline__ void store_both(uint8_t* tile, uint32_t peer_tile, uint32_t peer_full,
                                             const ProducerPlace& at, uint32_t rank) const {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = at.group + 32 * static_cast<int>(rank) + 16 * j;
#pragma unroll
      for (int i = 0; i < kPanels; ++i) {
        store_chunk_both(tile, peer_tile, peer_full,
                         (kFirst + i) * kPanelBytes + row * 128 + at.swizzled_chunk_bytes,
                         chunk[j][i]);
      }
    }
  }
};

}  // namespace sparse_mla::cuda::sm90a
