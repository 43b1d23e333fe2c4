// The seesaw ring shared by a 2-CTA cluster (a paired launch of 65..128 heads: the two CTAs hold
// the two 64-head halves of the same token and walk the same blocks, so each block's rows are
// gathered once per cluster instead of once per CTA), with the gather kept asynchronous. Per
// half-stage the producer of CTA k (rank k = its head group):
//   issue    once both CTAs' consumers freed the half-stage (its own empty barrier, relayed to the
//            peer's producer by one remote arrival on the peer's peer_free, and the peer's relay
//            on its own), cp.asyncs its rows among 32 k .. 32 k + 31 into its own tile and
//            arrives on its own full barrier as the copying producer does, thread 0 expecting
//            the peer's bytes of the half (arrive.expect_tx);
//   forward  once its copies of the half have landed (cp.async.wait_group), reads those chunks
//            back and stores them into the peer's tile with st.async, counted as transaction
//            bytes on the peer's full barrier.
// A half's forward runs behind the next half's issue, so that its copies are in flight while the
// landed ones are forwarded (PairedForward). Not always: the seesaw frees some halves only after
// consuming others (WG0 frees K0 left of pair n after WG1's scores on K1, which need K1 left of
// pair n), so a forward held back until the next half is free could wait on itself across the
// cluster. Before it waits for a release the producer tests it (mbarrier_test_parity); where
// either CTA's release is not in yet, it forwards what it holds first. A forward waits only on
// its own copies, so nothing it holds is ever needed by a wait it is blocked in.
//
// Thread t (group g = t / 8, chunk c = t % 8: ProducerPlace) copies chunk c of every panel of
// the half for rows g + 16 (2 k + j), j < 2: its entries 2 k, 2 k + 1 of the four list entries it
// holds for the block's validity flags (rows g + 16 r, r < 4).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/seesaw/config.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"

namespace sparse_mla::cuda::sm90a {

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
    for (int s = 0; s < 2 * kStages; ++s) {
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.peer_free[s]), 1);
    }
  }
  ptx::cluster_sync();
}

// Byte offset in a stage tile of the thread's chunk of panel `panel` of its row j (0, 1).
__device__ __forceinline__ uint32_t paired_chunk_offset(const ProducerPlace& at, uint32_t rank,
                                                        int j, int panel) {
  const int row = at.group + 32 * static_cast<int>(rank) + 16 * j;
  return panel * kPanelBytes + row * 128 + at.swizzled_chunk_bytes;
}

// The producer's side of the paired ring: the half-stage whose forward it still holds, and the
// waits that hand the ring between the two CTAs.
template <int kDqk>
struct PairedForward {
  int pending = -1;      // barrier index (2 stage + half) of the half not yet forwarded, or -1
  bool relayed = false;  // thread 0: this half-stage's release already relayed to the peer

  // Forwards the pending half once at most kInFlight of this thread's cp.async groups are still in
  // flight (1: the half issued after it; 0: all).
  template <int kInFlight, class SmemT>
  __device__ __forceinline__ void flush(SmemT& sm, const PeerRing& peer, const ProducerPlace& at) {
    switch (pending) {
      case 0:
        forward<kInFlight, 0, 0>(sm, peer, at);
        break;
      case 1:
        forward<kInFlight, 0, 1>(sm, peer, at);
        break;
      case 2:
        forward<kInFlight, 1, 0>(sm, peer, at);
        break;
      case 3:
        forward<kInFlight, 1, 1>(sm, peer, at);
        break;
      default:
        break;
    }
    pending = -1;
  }

  // Half-stage kIndex of ring pair `ring_pair` is free in both CTAs. If either release is not in
  // yet, the pending forward goes out first (the peer's consumers may need it to release theirs).
  template <int kIndex, class SmemT>
  __device__ __forceinline__ void wait_free(SmemT& sm, const PeerRing& peer,
                                            const ProducerPlace& at, int t, uint32_t ring_pair) {
    if (ring_pair == 0) return;
    const uint32_t parity = (ring_pair - 1) & 1;
    const uint32_t empty = smem_u32(&sm.empty[kIndex]);
    const uint32_t peer_free = smem_u32(&sm.peer_free[kIndex]);
    relayed = false;
    const bool own_free = ptx::mbarrier_test_parity(empty, parity);
    if (own_free && t == 0) relay<kIndex>(peer);
    if (!own_free || !ptx::mbarrier_test_parity(peer_free, parity)) {
      flush<0>(sm, peer, at);
    }
    ptx::mbarrier_wait_parity(empty, parity);
    if (t == 0 && !relayed) relay<kIndex>(peer);
    ptx::mbarrier_wait_parity_cluster(peer_free, parity);
  }

 private:
  template <int kIndex>
  __device__ __forceinline__ void relay(const PeerRing& peer) {
    ptx::mbarrier_arrive_remote(peer.peer_free + 8 * kIndex);
    relayed = true;
  }

  template <int kInFlight, int kStage, int kHalf, class SmemT>
  __device__ __forceinline__ void forward(SmemT& sm, const PeerRing& peer,
                                          const ProducerPlace& at) {
    constexpr int kIndex = 2 * kStage + kHalf;
    ptx::cp_async_wait<kInFlight>();
    const uint8_t* tile = sm.kv[kStage];
    const uint32_t peer_tile = peer.kv + kStage * kTileBytes<kDqk>;
    const uint32_t peer_full = peer.full + 8 * kIndex;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int panel = kHalfFirstPanel<kDqk, kHalf>; panel < kHalfEndPanel<kDqk, kHalf>; ++panel) {
        const uint32_t offset = paired_chunk_offset(at, peer.rank, j, panel);
        ptx::st_async_16(peer_tile + offset, *reinterpret_cast<const uint4*>(tile + offset),
                         peer_full);
      }
    }
    ptx::fence_proxy_async_shared();
  }
};

}  // namespace sparse_mla::cuda::sm90a
