// Hopper (sm_90a) sparse decode kernel over a paged FP8 or bf16 cache (SPEC §3; design in
// config.cuh and docs/kernels/sm90a_sparse_decode.md). Grid (parts, head groups of 64): CTA
// (part, group) walks the pieces of its DecodePartSchedule, each a work item of the seesaw
// (seesaw/consumers.cuh) with the ring and its barriers carried over from piece to piece. Roles,
// per piece:
//   producer   Q once the consumers' last scores of the previous piece are done, then per pair of
//              64-slot blocks (K0, K1; main list first, then extra) four half-stages in the order
//              the consumers free them: wait until free, cp.async the half's bytes (FP8: the raw
//              e4m3 bytes into the upper part of its own panels, the rows' scales into its lower
//              part and the bf16 tail into its panel; bf16: the rows as they are, the prefill's
//              copy), invalid slots zero-filled from slot 0 (never read), and arrive on the
//              half's full barrier as the copies land; the next pair's rows are L2-prefetched a
//              pair ahead;
//   consumers  the seesaw, as in the prefill, with the scoring warpgroup (WG0 for K0, WG1 for K1)
//              converting an FP8 half in place before its first MMA (convert_half: e4m3 x the
//              tile's scale, one rounding to bf16: v32_fp8 in fp32, v4_fp8's power of two in bf16,
//              cuda/device/fp8_dequant.cuh);
//   store      an unsplit query's bf16 out (sink applied) and natural-log lse, or a split piece's
//              fp32 partial (normalised by its own sum) and log2 partial lse for the combine
//              (decode::finish_row / store_row).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/params.h"
#include "cuda/decode/launch.h"
#include "cuda/decode/piece_inputs.cuh"
#include "cuda/decode/piece_target.cuh"
#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/page_divider.h"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cluster.cuh"  // mbarrier init and wait
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/ptx/grid_dependency.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "cuda/sm90a/seesaw/consumers.cuh"
#include "cuda/sm90a/seesaw/cta.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"
#include "cuda/sm90a/sparse_decode/config.cuh"
#include "cuda/sm90a/sparse_decode/launch.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::sm90a_decode {

using decode::DecodeLaunch;
using decode::QueryLists;

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
        lists(decode::query_lists<kBlockKeys>(p, b, s)),
        begin(query == part.begin_query ? part.begin_block : 0),
        end(query == part.end_query ? part.end_block : lists.blocks_total),
        num_pairs(end > begin ? (end - begin + 1) / 2 : 0) {}
};

// ---- producer ------------------------------------------------------------------------------

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
__device__ __forceinline__ decode::SlotRows locate_slot(const detail::KvCacheParams& cache,
                                                        const PageDivider& div, int32_t index,
                                                        bool* valid) {
  *valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const uint32_t slot = *valid ? static_cast<uint32_t>(index) : 0u;
  const uint32_t page = div.page(slot);
  return decode::page_token_rows<Traits>(cache, div.page_size, page, slot - page * div.page_size);
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
  const decode::SlotRows src =
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
__device__ __forceinline__ const uint8_t* half_scale_source(const decode::SlotRows& rows) {
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
__device__ __forceinline__ decode::SlotRows block_row(const detail::DecodeParams& p,
                                                      const CacheDividers& div,
                                                      const BlockRows& rows, int r, bool* valid) {
  return locate_slot<Traits>(rows.main ? p.cache : p.extra_cache, div.of(rows.main), rows.index[r],
                             valid);
}

// An FP8 half-stage's copies (issue_half): per row, the raw e4m3 units of the half into the upper
// part of its fp8 panels, the row's scales of the half into its lower 512 B and (half 1) the
// bf16 tail into its panel; the validity flags with the block's first half.
template <class Traits, int kStage, int kHalf, bool kUnion>
__device__ __forceinline__ void issue_fp8_half(const detail::DecodeParams& p,
                                               const CacheDividers& div, const BlockRows& rows,
                                               const ProducerPlace& at, bool writes_flags,
                                               uint32_t tile, Smem<Traits::kDqk>& sm) {
  constexpr int kPanels = kFp8Panels<Traits::kQuantDims, kHalf>;
  constexpr int kQuantPanels = Traits::kQuantDims / 64;
  constexpr int kRawPitch = kPanels * 64;
  const uint32_t half_base = tile + kHalf * kLeftPanels * kPanelBytes;
  const uint32_t raw = half_base + kPanels * kPanelBytes / 2;
  const HalfUnits<kPanels> units(at.chunk);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = at.group + 16 * r;
    bool valid;
    const decode::SlotRows src = block_row<Traits>(p, div, rows, r, &valid);
    if (at.chunk == 0) {
      if (!kUnion && writes_flags) sm.valid[kStage][row] = valid ? 1 : 0;
      ptx::cp_async_ca_8(half_base + 8 * row, half_scale_source<Traits, kHalf>(src),
                         valid ? 8u : 0u);
    }
    const uint8_t* fp8 = src.data + 256 * kHalf;
    const uint32_t raw_row = raw + row * kRawPitch;
    const uint32_t bytes = valid ? 16u : 0u;
    if (units.has_first)
      ptx::cp_async_cg_16(raw_row + 16 * units.first, fp8 + 16 * units.first, bytes);
    ptx::cp_async_cg_16(raw_row + 16 * units.second, fp8 + 16 * units.second, bytes);
    if constexpr (kHalf == 1) {
#pragma unroll
      for (int panel = kQuantPanels; panel < Traits::kDqk / 64; ++panel) {
        ptx::cp_async_cg_16(
            tile + panel * kPanelBytes + row * 128 + at.swizzled_chunk_bytes,
            src.data + Traits::kTailOffset + 128 * (panel - kQuantPanels) + 16 * at.chunk, bytes);
      }
    }
  }
}

// Over an index union (DecodeLaunch::index_union) a block's validity flags are its
// entries' token bits, copied as they are: 64 bytes from `src`, or zeros for a block past the
// piece (bytes 0; src is then any readable address).
struct BlockBits {
  const uint8_t* src;
  uint32_t bytes;
};

__device__ __forceinline__ BlockBits block_bits(const DecodeLaunch& launch, const Piece& w,
                                                int block) {
  const detail::DecodeParams& p = launch.p;
  const uint8_t* main = launch.index_union.bits + w.b * p.list.indices_stride_b;
  if (block >= w.end) return {main, 0u};
  if (block < w.lists.blocks_main) return {main + block * kBlockKeys, kBlockKeys};
  return {launch.index_union.extra_bits + w.b * p.extra_list.indices_stride_b +
              (block - w.lists.blocks_main) * kBlockKeys,
          kBlockKeys};
}

// One half-stage's copies: wait until its readers freed it (from the CTA's second ring pair on),
// check the slots (valid iff 0 <= index < the cache's slots), write the block's validity flags
// with its first half, cp.async the half's bytes and arrive on its full barrier once they land
// (cp.async.mbarrier.arrive.noinc) and, for the chunk-0 thread of each row, after its flags. A
// bf16 cache's rows go into the tile as they are; an FP8 cache's raw units, scales and tail are
// converted by the scoring warpgroup (convert_half). Over an index union the flags are the
// block's token bits, which four threads cp.async with the block's first half.
template <class Traits, int kStage, int kHalf, bool kUnion>
__device__ __forceinline__ void issue_half(const detail::DecodeParams& p, const CacheDividers& div,
                                           const BlockRows& rows, const ProducerPlace& at,
                                           uint32_t ring_pair, bool writes_flags, BlockBits bits,
                                           Smem<Traits::kDqk>& sm) {
  if (ring_pair > 0) {
    ptx::mbarrier_wait_parity(smem_u32(&sm.empty[2 * kStage + kHalf]), (ring_pair - 1) & 1);
  }
  const uint32_t tile = smem_u32(sm.kv[kStage]);
  if constexpr (Traits::kFormat == KvCacheFormat::kBf16) {
    // A bf16 row is the tile's row as is: the half's panels straight from the slot's row (the
    // prefill's copy), the flags written as each row is located.
    const auto row_source = [&](int r, bool* valid) {
      const uint8_t* data = block_row<Traits>(p, div, rows, r, valid).data;
      if (!kUnion && writes_flags && at.chunk == 0) {
        sm.valid[kStage][at.group + 16 * r] = *valid ? 1 : 0;
      }
      return data;
    };
    if constexpr (kHalf == 0) {
      copy_rows<0, kLeftPanels>(tile, at, row_source);
    } else {
      copy_rows<kLeftPanels, Traits::kDqk / 64>(tile, at, row_source);
    }
  } else {
    issue_fp8_half<Traits, kStage, kHalf, kUnion>(p, div, rows, at, writes_flags, tile, sm);
  }
  if (kUnion && writes_flags && at.group == 0 && at.chunk < kBlockKeys / 16) {
    ptx::cp_async_cg_16(smem_u32(sm.valid[kStage]) + 16 * at.chunk, bits.src + 16 * at.chunk,
                        bits.bytes == 0 ? 0u : 16u);
  }
  const uint32_t full = smem_u32(&sm.full[2 * kStage + kHalf]);
  ptx::cp_async_mbarrier_arrive_noinc(full);
  if (at.chunk == 0) ptx::mbarrier_arrive(full);
}

// Unit u (16 e4m3 values) of row `row` times its scale into fp8 panel u / 4 of the half. Unit
// u's scale: v32_fp8 tile (256 half + 16 u) / 128 = 2 half + u / 8, any fp32 applied in fp32;
// v4_fp8 tile (256 half + 16 u) / 64 = 4 half + u / 4, byte u / 4 of the loaded four, a power of
// two applied as one bf16 multiply per two values (dequant_e4m3x8_pow2: the same bits).
template <class Traits>
__device__ __forceinline__ void store_unit(uint8_t* half_base, int row, int u, const uint4& raw,
                                           const uint2& scales) {
  const int chunk = 2 * (u & 3);
  uint8_t* row_base = half_base + (u >> 2) * kPanelBytes + row * 128;
  uint4* lo = reinterpret_cast<uint4*>(row_base + ((chunk ^ (row & 7)) << 4));
  uint4* hi = reinterpret_cast<uint4*>(row_base + (((chunk + 1) ^ (row & 7)) << 4));
  if constexpr (Traits::kScaleEncoding == ScaleEncoding::kFloat32) {
    const float scale = __uint_as_float(u < 8 ? scales.x : scales.y);
    *lo = dequant_e4m3x8(make_uint2(raw.x, raw.y), scale);
    *hi = dequant_e4m3x8(make_uint2(raw.z, raw.w), scale);
  } else {
    const uint32_t scale = ue8m0_to_bf16x2((scales.x >> (8 * (u >> 2))) & 0xffu);
    *lo = dequant_e4m3x8_pow2(make_uint2(raw.x, raw.y), scale);
    *hi = dequant_e4m3x8_pow2(make_uint2(raw.z, raw.w), scale);
  }
}

// A half-stage's conversion by the warpgroup that scores it, once the half has landed (its full
// barrier): thread t of the warpgroup takes the rows and units of producer thread t's copies
// (ProducerPlace). Its rows' scales are read first, and a barrier of the warpgroup's 128 threads
// (kConvertBarrier + kStage: WG kStage scores stage kStage) passes before phase 1 overwrites them.
// Phase 1 writes panels [0, P / 2), below the raw bytes; phase 2's panels cover them, so their raw
// units are read into registers before the second barrier and written after it. Then the
// async-proxy fence and a third barrier, after which the warpgroup's MMAs may read the half. The
// other warpgroup reads it only after the P0 / P1 barrier that this one reaches after its scores.
template <class Traits, int kStage, int kHalf>
__device__ __forceinline__ void convert_half(Smem<Traits::kDqk>& sm) {
  constexpr int kPanels = kFp8Panels<Traits::kQuantDims, kHalf>;
  constexpr int kRawPitch = kPanels * 64;
  const ProducerPlace at(static_cast<int>(threadIdx.x) & (kProducerThreads - 1));
  constexpr int barrier = kConvertBarrier + kStage;  // stage kStage's scorer is WG kStage
  uint8_t* half_base = sm.kv[kStage] + kHalf * kLeftPanels * kPanelBytes;
  const uint8_t* raw = half_base + kPanels * kPanelBytes / 2;
  const HalfUnits<kPanels> units(at.chunk);
  HalfScales scales;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint2 v = *reinterpret_cast<const uint2*>(half_base + 8 * (at.group + 16 * r));
    scales.row[r] = Traits::kScalesInRow ? v : make_uint2(kHalf == 0 ? v.x : v.y, 0u);
  }
  ptx::named_barrier_sync(barrier, kProducerThreads);
  // Both phases convert one row per turn of a loop that is not unrolled (four turns): the code of
  // one unit per phase instead of four. Each turn takes row 0 of the held units and scales, which
  // then move down by one (constant indices: an index that depends on the turn would put them in
  // local memory).
  if (units.has_first) {
    // Each turn loads the next row's unit before it converts its own (the last turn loads row 3
    // again), so that the load's latency passes under a row's conversion; the scales turn round
    // (row 0 to the back), so that phase 2 finds them in order without a copy.
    const uint8_t* first = raw + at.group * kRawPitch + 16 * units.first;
    uint4 next = *reinterpret_cast<const uint4*>(first);
#pragma unroll 1
    for (int r = 0; r < 4; ++r) {
      const uint4 a = next;
      next = *reinterpret_cast<const uint4*>(first + 16 * kRawPitch * min(r + 1, 3));
      store_unit<Traits>(half_base, at.group + 16 * r, units.first, a, scales.row[0]);
      const uint2 done = scales.row[0];
      scales.row[0] = scales.row[1];
      scales.row[1] = scales.row[2];
      scales.row[2] = scales.row[3];
      scales.row[3] = done;
    }
  }
  // Phase 2's raw units are read once phase 1 is done (the registers phase 1's loads use) and held
  // across the barrier, after which phase 2's stores cover them.
  uint4 second[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    second[r] =
        *reinterpret_cast<const uint4*>(raw + (at.group + 16 * r) * kRawPitch + 16 * units.second);
  }
  ptx::named_barrier_sync(barrier, kProducerThreads);
#pragma unroll 1
  for (int r = 0; r < 4; ++r) {
    store_unit<Traits>(half_base, at.group + 16 * r, units.second, second[0], scales.row[0]);
    second[0] = second[1];
    second[1] = second[2];
    second[2] = second[3];
    scales.row[0] = scales.row[1];
    scales.row[1] = scales.row[2];
    scales.row[2] = scales.row[3];
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(barrier, kProducerThreads);
}

// The seesaw's hook between a half's landing and its scores (seesaw/consumers.cuh, Prepare): an
// FP8 half is converted in place; a bf16 half is scored as it landed.
template <class Traits>
struct ConvertInScorer {
  template <int kStage, int kHalf, class SmemT>
  __device__ __forceinline__ static void half(SmemT& sm) {
    convert_half<Traits, kStage, kHalf>(sm);
  }
};
template <class Traits>
using ScorerPrepare =
    std::conditional_t<Traits::kFormat == KvCacheFormat::kBf16, NoPrepare, ConvertInScorer<Traits>>;

template <class Traits, bool kUnion>
__device__ __forceinline__ void produce(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int head0, int t,
                                        Smem<Traits::kDqk>& sm) {
  constexpr int kDqk = Traits::kDqk;
  const detail::DecodeParams& p = launch.p;
  const ProducerPlace at(t);
  const CacheDividers div(p);
  const int ahead_block = t / kBlockKeys, ahead_row = t % kBlockKeys;  // prefetch_slot's row
  uint32_t ring_pairs = 0;  // pairs of the pieces before this one: the ring's phase
  uint32_t item_count = 0;
  // The head group's rows of query (b, s) into the Q tile; the consumers wait on q_full. Over an
  // index union (s = 0) row `head` is head head % heads_per_token of token head / heads_per_token.
  const auto copy_q = [&](int64_t b, int64_t s) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(p.q + b * p.q_stride_b + s * p.q_stride_s);
    copy_rows<0, kDqk / 64>(smem_u32(sm.q), at, [&](int r, bool* valid) {
      const int head = head0 + at.group + 16 * r;
      *valid = head < p.problem.h_q;
      const int row = *valid ? head : 0;
      if constexpr (kUnion) {
        const int token = row / launch.index_union.heads_per_token;
        return q + (token * p.q_stride_s +
                    (row - token * launch.index_union.heads_per_token) * p.q_stride_h) *
                       2;
      }
      return q + row * p.q_stride_h * 2;
    });
    ptx::cp_async_mbarrier_arrive_noinc(smem_u32(&sm.q_full));
  };
  for (int32_t query = part.begin_query; query <= part.end_query; ++query, ++item_count) {
    // The first piece's Q is issued before its list entries, whose loads wait for the list
    // lengths (one dependent load); a later piece's entries are loaded while the consumers still
    // score the previous piece, and its Q only once they are done with the previous one.
    // (Over an index union the query is the request, its s 0: said at compile time, so that the
    // union kernel keeps no 64-bit quotient live.)
    if (item_count == 0) {
      copy_q(kUnion ? query : query / p.problem.s_q, kUnion ? 0 : query % p.problem.s_q);
    }
    const Piece w(p, part, query);
    BlockRows k0 = block_rows(w, at, w.begin);
    BlockRows k1 = block_rows(w, at, w.begin + 1);
    int32_t ahead = list_entry(w, w.begin + 2 + ahead_block, ahead_row);  // pair 1's
    if (item_count > 0) {
      ptx::mbarrier_wait_parity(smem_u32(&sm.q_empty), (item_count - 1) & 1);
      copy_q(w.b, kUnion ? 0 : w.s);
    }
    for (int pair = 0; pair < w.num_pairs; ++pair) {
      // The halves' copies in the order the consumers free them, the next pair's rows
      // L2-prefetched first; the scoring warpgroups convert them.
      const uint32_t ring_pair = ring_pairs + pair;
      const bool has_next = pair + 1 < w.num_pairs;
      const int next_block = w.begin + 2 * pair + 2;
      if (has_next) prefetch_slot<Traits>(p, div, w, next_block + ahead_block, ahead);
      ahead = list_entry(w, next_block + 2 + ahead_block, ahead_row);
      const int block = w.begin + 2 * pair;
      const BlockBits no_bits{nullptr, 0u};
      issue_half<Traits, 0, 0, kUnion>(p, div, k0, at, ring_pair, true,
                                       kUnion ? block_bits(launch, w, block) : no_bits, sm);
      issue_half<Traits, 1, 1, kUnion>(p, div, k1, at, ring_pair, true,
                                       kUnion ? block_bits(launch, w, block + 1) : no_bits, sm);
      issue_half<Traits, 0, 1, kUnion>(p, div, k0, at, ring_pair, false, no_bits, sm);
      issue_half<Traits, 1, 0, kUnion>(p, div, k1, at, ring_pair, false, no_bits, sm);
      if (has_next) {
        k0 = block_rows(w, at, next_block);
        k1 = block_rows(w, at, next_block + 1);
      }
    }
    ring_pairs += w.num_pairs;
  }
  // Every copy (a piece without pairs still copies its Q) has landed before the producer exits.
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}

// ---- consumers and the store ---------------------------------------------------------------

// The piece's output through the split kernel's row stores (decode::PieceTarget): an
// unsplit query's out with the sink and its lse (natural log), or a split piece's partial row
// normalised by its sum and its log2 lse. Accumulator slice n holds columns 8 n + 2 (lane % 4),
// +1 of the warpgroup's 256: the [n][4] view of store_row. Over an index union (kUnion) an
// unsplit row `head` goes to head head % heads_per_token of token head / heads_per_token; a
// split piece's partial rows are the union call's heads, which the combine maps likewise.
template <bool kUnion>
__device__ __forceinline__ void store_piece(const DecodeLaunch& launch, const Piece& w,
                                            int32_t slot, int head0, const ConsumerPlace& at,
                                            RowState& st, float (&o)[128],
                                            float (&row_sum)[2][kHeadRows]) {
  publish_row_sums(at, st, row_sum, nullptr);
  decode::PieceTarget to{&launch, w.b, kUnion ? 0 : w.s, slot, head0};
  const auto& slices = *reinterpret_cast<const float(*)[32][4]>(&o);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int head = head0 + at.row[h];
    if (head >= launch.p.problem.h_q) continue;
    if (kUnion && slot < 0) {
      to.s = head / launch.index_union.heads_per_token;
      head -= static_cast<int>(to.s) * launch.index_union.heads_per_token;
    }
    const float l_total = row_sum[0][at.row[h]] + row_sum[1][at.row[h]];
    const float scale =
        decode::finish_row(to, head, st.m[h], l_total, at.wg == 0 && (at.lane & 3) == 0);
    decode::store_row<32>(to, head, 256 * at.wg + 2 * (at.lane & 3), slices, 2 * h, scale);
  }
}

// Over an index union a row attends the union's entries that hold its token's bit (row r of the
// request: token r / heads_per_token); a padding row (r >= the union call's heads) attends none.
// One register for both rows (the consumers have none to spare): row h's token bit in byte h.
struct KeysOfToken {
  uint32_t bits;
  __device__ __forceinline__ KeysOfToken(const ConsumerPlace& at, int head0,
                                         const DecodeLaunch& launch)
      : bits(0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = head0 + at.row[h];
      if (row < launch.p.problem.h_q)
        bits |= 1u << (row / launch.index_union.heads_per_token + 8 * h);
    }
  }
  __device__ __forceinline__ bool operator()(uint32_t flag, int h) const {
    return ((flag << (8 * h)) & bits) != 0;
  }
};

template <class Traits, bool kUnion>
__device__ __forceinline__ void consume(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int head0, int t,
                                        Smem<Traits::kDqk>& sm) {
  constexpr int kDqk = Traits::kDqk;
  const detail::DecodeParams& p = launch.p;
  const ConsumerPlace at(t);
  const auto admit = [&] {
    if constexpr (kUnion) {
      return KeysOfToken(at, head0, launch);
    } else {
      return KeysOfAll{};
    }
  }();
  const float scale_log2 = p.softmax_scale * kLog2e;
  const uint32_t q = smem_u32(sm.q);
  uint8_t* p1_tile = sm.p[0];
  uint8_t* p0_tile = kDqk == 576 ? sm.kv[0] + 8 * kPanelBytes : sm.p[kOwnPTiles<kDqk> - 1];
  uint32_t ring_pairs = 0;  // as the producer's
  uint32_t item_count = 0;
  for (int32_t query = part.begin_query; query <= part.end_query; ++query, ++item_count) {
    const Piece w(p, part, query);
    float o[128];
    RowState st;
    consume_item_pairs<kDqk, ScorerPrepare<Traits>>(
        q, p0_tile, p1_tile, at, scale_log2, w.num_pairs, ring_pairs, item_count, sm, st, o, admit);
    ring_pairs += w.num_pairs;
    store_piece<kUnion>(launch, w, planning::piece_partial_slot(part, query, launch.split_offsets),
                        head0, at, st, o, sm.row_sum[item_count & 1]);
  }
}

template <class Traits, bool kUnion>
__global__ void __launch_bounds__(kThreads, 1)
    sm90a_sparse_decode_kernel(const DecodeLaunch launch) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kDqk = Traits::kDqk;
  extern __shared__ uint8_t smem_raw[];
  Smem<kDqk>& sm = set_up_seesaw_cta<kDqk>(smem_raw, kFullArrivals);
  const int thread = threadIdx.x;
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int head0 = static_cast<int>(blockIdx.y) * kHeadRows;
  // The combine (a programmatic dependent launch, combine/split_combine.cu) may be launched now:
  // its CTAs take the SMs as this grid's CTAs leave and wait there for the whole grid's results
  // (griddepcontrol.wait), so its launch no longer follows this grid's end. Only for a
  // grid of one wave (the launch shape's one CTA per SM), where no CTA of this grid can be left
  // waiting for an SM that a waiting combine CTA holds.
  if (gridDim.x * gridDim.y <= ptx::sm_count()) ptx::launch_dependents();
  if (thread >= kConsumerThreads) {
    ptx::setmaxnreg_dec<kProducerRegs>();
    produce<Traits, kUnion>(launch, part, head0, thread - kConsumerThreads, sm);
  } else {
    ptx::setmaxnreg_inc<kConsumerRegs>();
    consume<Traits, kUnion>(launch, part, head0, thread, sm);
  }
#else
  __trap();
#endif
}

template <KvCacheFormat kFormat, int kDqk>
int sm90a_decode_smem_bytes() {
  return static_cast<int>(sizeof(Smem<kDqk>)) + 1024;
}

template <KvCacheFormat kFormat, int kDqk>
Status launch_sm90a_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  using Traits = KvTraits<kFormat, kDqk>;
  const int head_groups = static_cast<int>((launch.p.problem.h_q + kHeadRows - 1) / kHeadRows);
  const int smem = sm90a_decode_smem_bytes<kFormat, kDqk>();
  const dim3 grid(static_cast<unsigned>(launch.num_parts), static_cast<unsigned>(head_groups));
  // Over an index union: its own instantiation, so that a call over the tokens' own lists runs
  // without the union's flag copies, row addressing and row masks.
  const auto kernel = launch.index_union.heads_per_token > 0
                          ? sm90a_sparse_decode_kernel<Traits, true>
                          : sm90a_sparse_decode_kernel<Traits, false>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  kernel<<<grid, kThreads, smem, stream>>>(launch);
  return check_last_launch("sm90a_sparse_decode_kernel");
}

}  // namespace sparse_mla::cuda::sm90a_decode
