// The seesaw ring shared by a 2-CTA cluster (a paired launch of 65..128 heads: the two CTAs hold
// the two 64-head halves of the same token and walk the same blocks, so each block's rows are
// gathered once per cluster instead of once per CTA), with the gather kept asynchronous. Per
// half-stage the producer of CTA k (rank k = its head group):
//   issue    once both CTAs' consumers freed the half-stage (its own empty barrier, relayed to the
//            peer's producer by one remote arrival on the peer's peer_free, and the peer's relay
//            on its own), cp.asyncs its rows among 32 k .. 32 k + 31 into its own tile and
//            arrives on its own full barrier as the copying producer does, thread 0 expecting
//            the peer's bytes of the half (arrive.expect_tx), and on the half's landed barrier;
//   forward  thread 0, once the landed barrier says all 128 threads' copies of the half are in,
//            hands the rows to the bulk-copy engine: per panel one cp.async.bulk of the 32 rows'
//            4 KiB (rows 32 k .. 32 k + 31 of a panel are contiguous, and the swizzle is a
//            function of the address, the same in both CTAs) into the peer's tile, completing as
//            transaction bytes on the peer's full barrier.
// No thread waits for its own copies: thread 0 forwards whatever has landed while it waits for a
// release, and once after each half's issue. It must not block on a release while it holds a
// half that has not gone out: the seesaw frees some halves only after consuming others (WG0 frees
// K0 left of pair n after WG1's scores on K1, which need K1 left of pair n), so a forward held
// back behind a release could wait on itself across the cluster. So while anything is pending it
// polls (mbarrier.test_wait) the release and the pending halves' landed barriers in turn; a
// landing depends on nothing but memory, so the blocking flush before the item's Q wait and at the
// producer's exit is safe.
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
// each), the landed barriers (the producer's 128 cp.async arrivals), and a cluster barrier that
// orders every barrier's initialisation before the peer's first remote arrival or bulk copy.
template <class SmemT>
__device__ __forceinline__ void set_up_paired_ring(SmemT& sm) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2 * kStages; ++s) {
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.peer_free[s]), 1);
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.landed[s]), kProducerThreads);
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

// The producer's side of the paired ring: the half-stages issued but not yet forwarded (thread 0
// only), and the waits that hand the ring between the two CTAs.
template <int kDqk>
struct PairedForward {
  uint32_t pending = 0;  // bit i: half-stage i (2 stage + half) issued, not forwarded yet
  uint32_t parity = 0;   // bit i: the phase parity of half-stage i's landed barrier

  // Half-stage kIndex of ring pair `ring_pair` was issued (every producer thread arrived on its
  // landed barrier): thread 0 will forward it.
  template <int kIndex>
  __device__ __forceinline__ void issued(uint32_t ring_pair) {
    pending |= 1u << kIndex;
    parity = (parity & ~(1u << kIndex)) | ((ring_pair & 1u) << kIndex);
  }

  // Forwards every pending half-stage whose copies have landed (thread 0).
  template <class SmemT>
  __device__ __forceinline__ void forward_landed(SmemT& sm, const PeerRing& peer) {
#pragma unroll
    for (int i = 0; i < 2 * kStages; ++i) {
      if ((pending >> i & 1u) != 0 &&
          ptx::mbarrier_test_parity(smem_u32(&sm.landed[i]), parity >> i & 1u)) {
        forward(sm, peer, i);
      }
    }
  }

  // Forwards every pending half-stage, waiting for its copies to land (thread 0).
  template <class SmemT>
  __device__ __forceinline__ void flush(SmemT& sm, const PeerRing& peer) {
#pragma unroll
    for (int i = 0; i < 2 * kStages; ++i) {
      if ((pending >> i & 1u) != 0) {
        ptx::mbarrier_wait_parity(smem_u32(&sm.landed[i]), parity >> i & 1u);
        forward(sm, peer, i);
      }
    }
  }

  // Half-stage kIndex of ring pair `ring_pair` is free in both CTAs. Thread 0 relays its own
  // release to the peer as soon as it is in and, while either release is missing and it holds
  // pending halves, forwards those that land (the peer's consumers may need them to release).
  template <int kIndex, class SmemT>
  __device__ __forceinline__ void wait_free(SmemT& sm, const PeerRing& peer, int t,
                                            uint32_t ring_pair) {
    if (ring_pair == 0) return;
    const uint32_t phase = (ring_pair - 1) & 1;
    const uint32_t empty = smem_u32(&sm.empty[kIndex]);
    const uint32_t peer_free = smem_u32(&sm.peer_free[kIndex]);
    if (t == 0) {
      bool relayed = false;
      while (pending != 0) {
        const bool own_free = ptx::mbarrier_test_parity(empty, phase);
        if (own_free && !relayed) {
          ptx::mbarrier_arrive_remote(peer.peer_free + 8 * kIndex);
          relayed = true;
        }
        if (own_free && ptx::mbarrier_test_parity(peer_free, phase)) break;
        forward_landed(sm, peer);
      }
      ptx::mbarrier_wait_parity(empty, phase);
      if (!relayed) ptx::mbarrier_arrive_remote(peer.peer_free + 8 * kIndex);
    }
    ptx::mbarrier_wait_parity(empty, phase);
    ptx::mbarrier_wait_parity_cluster(peer_free, phase);
  }

 private:
  // The bulk copies of half-stage i's rows of this CTA into the peer's tile, one per panel.
  template <class SmemT>
  __device__ __forceinline__ void forward(SmemT& sm, const PeerRing& peer, int i) {
    const int stage = i >> 1;
    const int first = (i & 1) * kLeftPanels;
    const int end = (i & 1) == 0 ? kLeftPanels : kDqk / 64;
    const uint32_t rows = static_cast<uint32_t>(stage) * kTileBytes<kDqk> + 32u * 128u * peer.rank;
    const uint32_t own = smem_u32(sm.kv[0]) + rows;
    // The rows were written by cp.async (completed through the landed barrier); the bulk copy
    // reads them through the async proxy.
    ptx::fence_proxy_async_shared();
    for (int panel = first; panel < end; ++panel) {
      const uint32_t offset = static_cast<uint32_t>(panel) * kPanelBytes;
      ptx::bulk_copy_to_peer(peer.kv + rows + offset, own + offset, 32u * 128u,
                             peer.full + 8u * static_cast<uint32_t>(i));
    }
    pending &= ~(1u << i);
  }
};

}  // namespace sparse_mla::cuda::sm90a
