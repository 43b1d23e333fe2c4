// The Hopper decode's paired producer (docs/kernels/sm90a_sparse_decode.md, "Paired head
// groups"): at two head groups (65..128 heads) the two CTAs of a 2-CTA cluster hold the two
// 64-head halves of the same query and walk the same blocks, so each block's rows are gathered
// and dequantised once per cluster instead of once per CTA (FlashMLA's "crossover", here with
// bf16 caches too), through the paired ring (seesaw/paired_ring.cuh). Per half-stage, the
// producer of CTA k:
//   1. loads the half's bytes of its rows of 32 k .. 32 k + 31 into registers (16-B units, the
//      rows' scales, the bf16 tail) before it waits for the buffers: the loads need none;
//   2. waits until both CTAs' consumers freed the half-stage (wait_paired_half_free);
//   3. writes the block's validity flags (all 64 rows, from its own list entries), converts its
//      rows to bf16 (FP8: e4m3 x the tile's scale, convert_unit; bf16: as they are) and stores
//      each 16-B chunk into its own tile and the peer's;
//   4. publishes the half (publish_paired_half): it completes once both CTAs' rows are in.
// The consumers score the half as it landed (NoPrepare), as on a bf16 cache. Per row a thread
// takes the copying producer's units (HalfUnits) and chunk c of each bf16 panel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/sm90a/seesaw/config.cuh"
#include "cuda/sm90a/seesaw/paired_ring.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"
#include "cuda/sm90a/sparse_decode/config.cuh"
#include "cuda/sm90a/sparse_decode/half_stage_rows.cuh"

namespace sparse_mla::cuda::sm90a_decode {

// The registers of one owned row of an FP8 half: its units (HalfUnits' first and second), its
// scales (the half's two fp32 of v32_fp8 in x, y; the half's ue8m0 bytes of v4_fp8 in x) and
// its chunk of each tail panel.
template <class Traits, int kHalf>
struct Fp8RowUnits {
  static constexpr int kTailPanels = kHalf == 1 ? (Traits::kDqk - Traits::kQuantDims) / 64 : 0;
  uint4 first, second;
  uint2 scales;
  uint4 tail[kTailPanels > 0 ? kTailPanels : 1];
};

template <class Traits, int kHalf>
__device__ __forceinline__ Fp8RowUnits<Traits, kHalf> load_fp8_row(
    const portable_decode::SlotRows& src, bool valid, const ProducerPlace& at,
    const HalfUnits<kFp8Panels<Traits::kQuantDims, kHalf>>& units) {
  Fp8RowUnits<Traits, kHalf> r;
  const uint8_t* fp8 = src.data + 256 * kHalf;
  r.first = units.has_first ? load_chunk_if(valid, fp8 + 16 * units.first) : make_uint4(0, 0, 0, 0);
  r.second = load_chunk_if(valid, fp8 + 16 * units.second);
  const uint2 s = valid
                      ? __ldg(reinterpret_cast<const uint2*>(half_scale_source<Traits, kHalf>(src)))
                      : make_uint2(0u, 0u);
  r.scales = Traits::kScalesInRow ? s : make_uint2(kHalf == 0 ? s.x : s.y, 0u);
#pragma unroll
  for (int i = 0; i < Fp8RowUnits<Traits, kHalf>::kTailPanels; ++i) {
    r.tail[i] = load_chunk_if(valid, src.data + Traits::kTailOffset + 128 * i + 16 * at.chunk);
  }
  return r;
}

template <class Traits, int kHalf>
__device__ __forceinline__ void store_fp8_row(
    const Fp8RowUnits<Traits, kHalf>& r, int row, const ProducerPlace& at,
    const HalfUnits<kFp8Panels<Traits::kQuantDims, kHalf>>& units, uint8_t* tile,
    uint32_t peer_tile, uint32_t peer_full) {
  constexpr uint32_t kHalfBase = kHalfFirstPanel<Traits::kDqk, kHalf> * kPanelBytes;
  constexpr int kQuantPanels = Traits::kQuantDims / 64;
  const auto store_unit_both = [&](int u, const uint4& raw) {
    const UnitChunks c = convert_unit<Traits>(u, raw, r.scales);
    store_chunk_both(tile, peer_tile, peer_full, kHalfBase + unit_chunk_offset(row, u, 0), c.lo);
    store_chunk_both(tile, peer_tile, peer_full, kHalfBase + unit_chunk_offset(row, u, 1), c.hi);
  };
  if (units.has_first) store_unit_both(units.first, r.first);
  store_unit_both(units.second, r.second);
#pragma unroll
  for (int i = 0; i < Fp8RowUnits<Traits, kHalf>::kTailPanels; ++i) {
    store_chunk_both(tile, peer_tile, peer_full,
                     (kQuantPanels + i) * kPanelBytes + row * 128 + at.swizzled_chunk_bytes,
                     r.tail[i]);
  }
}

// One half-stage of the paired ring (steps 1-4 above). `rows` holds the thread's four list
// entries (rows g + 16 r, r < 4: all 64 rows' flags); its own rows are entries 2 rank, 2 rank + 1.
template <class Traits, int kStage, int kHalf>
__device__ __forceinline__ void fill_paired_half(const detail::DecodeParams& p,
                                                 const CacheDividers& div, const BlockRows& rows,
                                                 const ProducerPlace& at, int t, uint32_t ring_pair,
                                                 bool writes_flags, Smem<Traits::kDqk>& sm,
                                                 const PeerRing& peer) {
  constexpr int kDqk = Traits::kDqk;
  constexpr int kIndex = 2 * kStage + kHalf;
  constexpr bool kFp8 = Traits::kFormat != KvCacheFormat::kBf16;
  const bool upper = peer.rank != 0;
  BlockRows own;  // entries 0, 1: the thread's two rows of this CTA's half of the block
  own.main = rows.main;
  own.index[0] = upper ? rows.index[2] : rows.index[0];
  own.index[1] = upper ? rows.index[3] : rows.index[1];
  own.index[2] = own.index[3] = -1;

  // 1. The owned rows' bytes into registers.
  using Units = HalfUnits<kFp8 ? kFp8Panels<Traits::kQuantDims, kHalf> : kLeftPanels>;
  const Units units(at.chunk);
  [[maybe_unused]] Fp8RowUnits<Traits, kHalf> fp8_rows[2];
  [[maybe_unused]] PairedBf16Rows<kDqk, kHalf> bf16_rows;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    bool valid;
    const portable_decode::SlotRows src = block_row<Traits>(p, div, own, j, &valid);
    if constexpr (kFp8) {
      fp8_rows[j] = load_fp8_row<Traits, kHalf>(src, valid, at, units);
    } else {
      bf16_rows.load(j, src.data, valid, at);
    }
  }

  // 2. Both CTAs' consumers are done with the half-stage.
  wait_paired_half_free<kIndex>(sm, peer, t, ring_pair);

  // 3. Flags, then the rows into both tiles.
  if (writes_flags && at.chunk == 0) {
    const detail::KvCacheParams& cache = rows.main ? p.cache : p.extra_cache;
    const int64_t slots = cache.num_blocks * cache.page_block_size;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      sm.valid[kStage][at.group + 16 * r] = rows.index[r] >= 0 && rows.index[r] < slots ? 1 : 0;
    }
  }
  uint8_t* tile = sm.kv[kStage];
  const uint32_t peer_tile = peer.kv + kStage * kTileBytes<kDqk>;
  const uint32_t peer_full = peer.full + 8 * kIndex;
  if constexpr (kFp8) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int row = at.group + 32 * static_cast<int>(peer.rank) + 16 * j;
      store_fp8_row<Traits, kHalf>(fp8_rows[j], row, at, units, tile, peer_tile, peer_full);
    }
  } else {
    bf16_rows.store_both(tile, peer_tile, peer_full, at, peer.rank);
  }

  // 4. Visible to the consumers' wgmma; the half completes with the peer's bytes too.
  publish_paired_half<kDqk, kIndex>(sm, t);
}

}  // namespace sparse_mla::cuda::sm90a_decode
