// What a decode piece reads before its blocks (the portable split kernels; the Hopper decode
// takes its lists and row addresses): the query's two index lists with their clamped lengths and
// block counts, a block's index list entries and their rows' addresses, and the head group's Q
// rows.
#pragma once

#include <cstdint>

#include "core/params.h"
#include "cuda/device/gather.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/smem_tile.cuh"

namespace sparse_mla::cuda::decode {

// A query's two index lists, clamped lengths and block counts.
struct QueryLists {
  const int32_t* main;   // [topk] int32
  const int32_t* extra;  // [extra_topk] int32 or nullptr
  int64_t n_main, n_extra;
  int blocks_main, blocks_total;
};

template <int kBlockKeys>
__device__ __forceinline__ QueryLists query_lists(const detail::DecodeParams& p, int64_t b,
                                                  int64_t s) {
  QueryLists q;
  q.main = p.list.indices + b * p.list.indices_stride_b + s * p.list.indices_stride_s;
  q.n_main = detail::effective_topk(p.list, b, s);
  q.extra = nullptr;
  q.n_extra = 0;
  if (p.has_extra) {
    q.extra = p.extra_list.indices + b * p.extra_list.indices_stride_b +
              s * p.extra_list.indices_stride_s;
    q.n_extra = detail::effective_topk(p.extra_list, b, s);
  }
  q.blocks_main = static_cast<int>((q.n_main + kBlockKeys - 1) / kBlockKeys);
  q.blocks_total = q.blocks_main + static_cast<int>((q.n_extra + kBlockKeys - 1) / kBlockKeys);
  return q;
}

// load (index): the index list entry of slot `thread` of block `block` (main blocks first, then
// extra blocks), or -1 past the list's valid length. Issued a block ahead of its use (see the
// kernel loop) so that its global latency overlaps the wait for the current block's rows.
template <class Shape>
__device__ __forceinline__ int32_t slot_index(const QueryLists& lists, int block, int thread) {
  if (thread >= Shape::kBlockKeys) return -1;
  const bool is_main = block < lists.blocks_main;
  const int32_t* indices = is_main ? lists.main : lists.extra;
  const int64_t n = is_main ? lists.n_main : lists.n_extra;
  const int64_t k =
      static_cast<int64_t>(is_main ? block : block - lists.blocks_main) * Shape::kBlockKeys +
      thread;
  return k < n ? __ldg(indices + k) : -1;
}

// load (addresses): the data row and (split-scale formats) the scale row of slot `slot` of
// `cache`. Callers pass a valid slot (0 <= index < num_blocks * page_block_size, written out at
// each call: as a function it compiled to other SASS) or 0 for an invalid one, whose rows are then
// read in bounds and zero-filled. Slots are int32 (< 2^31) and page_block_size <= INT32_MAX
// (validated), so the page split is a 32-bit division.
struct SlotRows {
  const uint8_t* data;
  const uint8_t* scales;  // nullptr where the scales are in the data row
};

// The rows of token t of page `page`, pages of `page_size` (= cache.page_block_size) tokens: a
// caller that splits slots its own way (the Hopper decode's multiply-high PageDivider) starts
// here.
template <class Traits>
__device__ __forceinline__ SlotRows page_token_rows(const detail::KvCacheParams& cache,
                                                    int64_t page_size, uint32_t page, uint32_t t) {
  const uint8_t* block_base = cache.data + static_cast<int64_t>(page) * cache.block_stride_bytes;
  SlotRows rows;
  rows.data = block_base + static_cast<int64_t>(t) * Traits::kDataRowBytes;
  rows.scales = nullptr;
  if constexpr (!Traits::kScalesInRow) {
    rows.scales = block_base + page_size * Traits::kDataRowBytes +
                  static_cast<int64_t>(t) * Traits::kScaleRowBytes;
  }
  return rows;
}

template <class Traits>
__device__ __forceinline__ SlotRows slot_rows(const detail::KvCacheParams& cache, uint32_t slot) {
  const uint32_t page_size = static_cast<uint32_t>(cache.page_block_size);
  const uint32_t page = slot / page_size;
  return page_token_rows<Traits>(cache, cache.page_block_size, page, slot - page * page_size);
}

// load (Q): the head group's rows of query (b, s); heads >= h_q are zero-filled from head 0.
template <class Shape, class Smem>
__device__ __forceinline__ void load_q(const detail::DecodeParams& p, int64_t b, int64_t s,
                                       int head0, int thread, Smem& sm) {
  gather_head_rows<Shape::kRows, Shape::kChunksPerRow, Shape::kThreads>(
      smem_u32(sm.q), thread,
      reinterpret_cast<const uint8_t*>(p.q + b * p.q_stride_b + s * p.q_stride_s), p.q_stride_h * 2,
      static_cast<int>(p.problem.h_q), head0);
}

}  // namespace sparse_mla::cuda::decode
