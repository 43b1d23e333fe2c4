// Where the rows of a Hopper decode half-stage come from and what they become (design in
// config.cuh and docs/kernels/sm90a_sparse_decode.md), shared by the two ways the ring is filled:
// the copying producer with the scoring warpgroup's in-place conversion (kernel.cuh) and the
// paired producer of a 2-CTA cluster that converts from registers (paired_producer.cuh). A piece
// of the CTA's part, its blocks' list entries, the slots' rows (multiply-high page split), the L2
// prefetch a pair ahead, a half's scale bytes and raw units, and a unit's conversion to bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/page_divider.h"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/piece_inputs.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"
#include "cuda/sm90a/sparse_decode/config.cuh"

namespace sparse_mla::cuda::sm90a_decode {

using portable_decode::QueryLists;

// One piece of the CTA's part: query (b, s), its blocks [begin, end) of the main list then the
// extra list, in pairs (the last pair's K1 may lie past `end`: all its slots are invalid).
struct Piece {
  int64_t b, s;
  QueryLists lists;
  int begin, end, num_pairs;
  __device__ __forceinline__ Piece(const detail::DecodeParams& p,
                                   const planning::DecodePartSchedule& part, int32_t query)
      : b(query / p.problem.s_q),
        s(query % p.problem.s_q),
        lists(portable_decode::query_lists<kBlockKeys>(p, b, s)),
        begin(query == part.begin_query ? part.begin_block : 0),
        end(query == part.end_query ? part.end_block : lists.blocks_total),
        num_pairs(end > begin ? (end - begin + 1) / 2 : 0) {}
};

// The thread's four list entries (rows at.group + 16 r) of block `block` of the piece, -1 past
// the block's list or for a block past the piece; raw: range-checked where they are used, so that
// the loads issued a pair ahead are not waited for when issued.
struct BlockRows {
  int32_t index[4];
  bool main;  // the block is in the main list (else the extra list)
};

// Entry `row` of block `block` of the piece's lists (main blocks first), -1 past the block's list
// or for a block past the piece.
__device__ __forceinline__ int32_t list_entry(const Piece& w, int block, int row) {
  const bool main = block < w.lists.blocks_main;
  const int32_t* list = main ? w.lists.main : w.lists.extra;
  const int64_t n = block < w.end ? (main ? w.lists.n_main : w.lists.n_extra) : 0;
  const int64_t k =
      static_cast<int64_t>(main ? block : block - w.lists.blocks_main) * kBlockKeys + row;
  return k < n ? __ldg(list + k) : -1;
}

__device__ __forceinline__ BlockRows block_rows(const Piece& w, const ProducerPlace& at,
                                                int block) {
  BlockRows rows;
  rows.main = block < w.lists.blocks_main;
#pragma unroll
  for (int r = 0; r < 4; ++r) rows.index[r] = list_entry(w, block, at.group + 16 * r);
  return rows;
}

// The page split of both caches' slots (PageDivider: a multiply-high, not a division).
struct CacheDividers {
  PageDivider main, extra;
  __device__ __forceinline__ explicit CacheDividers(const detail::DecodeParams& p)
      : main(static_cast<uint32_t>(p.cache.page_block_size)),
        extra(p.has_extra ? static_cast<uint32_t>(p.extra_cache.page_block_size) : 1u) {}
  // One cache's divider, chosen field by field: `in_main ? main : extra` would take the address
  // of one of the two, which puts both in local memory (three local loads per row).
  __device__ __forceinline__ PageDivider of(bool in_main) const {
    PageDivider d = extra;
    d.page_size = in_main ? main.page_size : extra.page_size;
    d.magic = in_main ? main.magic : extra.magic;
    d.shift = in_main ? main.shift : extra.shift;
    return d;
  }
};

// Slot `index` of `cache`: whether it is valid (0 <= index < the cache's slots) and its data and
// scale rows (slot 0's, in bounds, for an invalid one).
template <class Traits>
__device__ __forceinline__ portable_decode::SlotRows locate_slot(const detail::KvCacheParams& cache,
                                                                 const PageDivider& div,
                                                                 int32_t index, bool* valid) {
  *valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const uint32_t slot = *valid ? static_cast<uint32_t>(index) : 0u;
  const uint32_t page = div.page(slot);
  return portable_decode::page_token_rows<Traits>(cache, div.page_size, page,
                                                  slot - page * div.page_size);
}

// The L2 prefetch that runs a pair ahead of the copies: producer thread t owns row t % 64 of block
// t / 64 of a pair. Its list entry is loaded one pair before the prefetch is issued, so neither
// waits; the prefetch brings the slot's whole data row (and v4_fp8's scale row) into L2, where the
// half-stages' cp.asyncs and scale loads of the next pair find them.
template <class Traits>
__device__ __forceinline__ void prefetch_slot(const detail::DecodeParams& p,
                                              const CacheDividers& div, const Piece& w, int block,
                                              int32_t index) {
  if (block >= w.end) return;
  const bool main = block < w.lists.blocks_main;
  bool valid;
  const portable_decode::SlotRows src =
      locate_slot<Traits>(main ? p.cache : p.extra_cache, div.of(main), index, &valid);
  if (!valid) return;
  ptx::prefetch_l2_bulk(src.data, Traits::kDataRowBytes);
  if constexpr (!Traits::kScalesInRow) ptx::prefetch_l2(src.scales);
}

// The rows' scales a half-stage's conversion needs travel with its copies: the chunk-0 producer
// thread of each row cp.asyncs 8 bytes into the first 512 B of the half's own bf16 region (free
// until the conversion's first phase writes it): v32_fp8 the two fp32 scales of the half's 256
// dims (tiles of 128), v4_fp8 the row's eight ue8m0 bytes (tiles of 64; the half's four are
// bytes 4 half ..). Zero for an invalid row, whose raw bytes are zero too. The converting thread
// holds its four rows' in registers (v4_fp8: the half's four bytes in x).
struct HalfScales {
  uint2 row[4];
};

template <class Traits, int kHalf>
__device__ __forceinline__ const uint8_t* half_scale_source(const portable_decode::SlotRows& rows) {
  if constexpr (Traits::kScalesInRow) {
    static_assert(Traits::kTileSize == 128 && Traits::kScaleOffset % 8 == 0);
    return rows.data + Traits::kScaleOffset + 8 * kHalf;
  } else {
    static_assert(Traits::kTileSize == 64 && Traits::kScaleRowBytes == 8);
    return rows.scales;
  }
}

// A thread's 16-B raw units of a row of the half (unit u = dims 16 u .. 16 u + 15 of the half's
// fp8 dims; it becomes chunks 2 (u % 4), +1 of fp8 panel u / 4): at most one in each conversion
// phase. 4 panels: units c (phase 1) and c + 8 (phase 2); 3 panels: unit c in phase 1 for c < 4,
// and c + 8 (c < 4) or c (c >= 4) in phase 2.
template <int kPanels>
struct HalfUnits {
  static constexpr int kPhase1Units = 4 * (kPanels / 2);  // panels [0, kPanels / 2)
  bool has_first;
  int first, second;
  __device__ __forceinline__ explicit HalfUnits(int c)
      : has_first(c < kPhase1Units), first(c), second(c + 8 < 4 * kPanels ? c + 8 : c) {}
};

// Row r of a block: whether its slot is valid (0 <= index < the cache's slots) and its data and
// scale rows (slot 0's, in bounds, for an invalid one).
template <class Traits>
__device__ __forceinline__ portable_decode::SlotRows block_row(const detail::DecodeParams& p,
                                                               const CacheDividers& div,
                                                               const BlockRows& rows, int r,
                                                               bool* valid) {
  return locate_slot<Traits>(rows.main ? p.cache : p.extra_cache, div.of(rows.main), rows.index[r],
                             valid);
}

// Unit u (16 e4m3 values) of a half times its scale, as the two 16-B bf16 chunks it becomes
// (lo: chunk 2 (u % 4), hi: the next one, of fp8 panel u / 4). Unit u's scale: v32_fp8 tile
// (256 half + 16 u) / 128 = 2 half + u / 8, any fp32 applied in fp32 (scales.x for u < 8, else
// scales.y); v4_fp8 tile (256 half + 16 u) / 64 = 4 half + u / 4, byte u / 4 of scales.x, a power
// of two applied as one bf16 multiply per two values (dequant_e4m3x8_pow2: the same bits).
struct UnitChunks {
  uint4 lo, hi;
};

template <class Traits>
__device__ __forceinline__ UnitChunks convert_unit(int u, const uint4& raw, const uint2& scales) {
  UnitChunks c;
  if constexpr (Traits::kScaleEncoding == ScaleEncoding::kFloat32) {
    const float scale = __uint_as_float(u < 8 ? scales.x : scales.y);
    c.lo = dequant_e4m3x8(make_uint2(raw.x, raw.y), scale);
    c.hi = dequant_e4m3x8(make_uint2(raw.z, raw.w), scale);
  } else {
    const uint32_t scale = ue8m0_to_bf16x2((scales.x >> (8 * (u >> 2))) & 0xffu);
    c.lo = dequant_e4m3x8_pow2(make_uint2(raw.x, raw.y), scale);
    c.hi = dequant_e4m3x8_pow2(make_uint2(raw.z, raw.w), scale);
  }
  return c;
}

// Byte offsets of unit u's two chunks in a half-stage of a [64, d_qk] tile, for row `row`.
__device__ __forceinline__ uint32_t unit_chunk_offset(int row, int u, int which) {
  const int chunk = 2 * (u & 3) + which;
  return (u >> 2) * kPanelBytes + row * 128 + ((chunk ^ (row & 7)) << 4);
}

}  // namespace sparse_mla::cuda::sm90a_decode
