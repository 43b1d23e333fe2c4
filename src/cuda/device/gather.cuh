// Row gathers with cp.async for the portable kernels: every thread of the CTA issues 16-B
// copies of gathered rows, consecutive threads taking consecutive chunks of one row (coalesced
// 128-B segments). A row whose source is invalid is zero-filled (src_size 0) from an address the
// caller has already clamped in bounds, so invalid indices are never dereferenced.
#pragma once

#include <cstdint>

#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/row_chunk_walk.h"
#include "cuda/device/smem_tile.cuh"

namespace sparse_mla::cuda {

// A row to gather: `ptr` always points at readable memory; `valid` = copy, else zero-fill.
struct RowSource {
  const uint8_t* ptr;
  bool valid;
};

// kRows rows of kChunks 16-B chunks into a swizzled bf16 tile (smem_tile.cuh layout), at tile
// chunks kFirstChunk .. kFirstChunk + kChunks - 1 of each row. row_source(row) -> RowSource.
template <int kRows, int kChunks, int kThreads, int kFirstChunk = 0, class RowSourceFn>
__device__ __forceinline__ void gather_rows_swizzled(uint32_t tile, int thread,
                                                     RowSourceFn row_source) {
  for_each_row_chunk<kRows, kChunks, kThreads>(thread, [&](int row, int chunk) {
    const RowSource src = row_source(row);
    ptx::cp_async_cg_16(tile + tile_chunk_offset<kRows>(row, kFirstChunk + chunk),
                        src.ptr + 16 * chunk, src.valid ? 16u : 0u);
  });
}

// kRows rows of kChunks 16-B chunks into a linear buffer with a row pitch of kPitch bytes.
template <int kRows, int kChunks, int kPitch, int kThreads, class RowSourceFn>
__device__ __forceinline__ void gather_rows_linear(uint32_t buffer, int thread,
                                                   RowSourceFn row_source) {
  static_assert(kPitch % 16 == 0 && kPitch >= 16 * kChunks);
  for_each_row_chunk<kRows, kChunks, kThreads>(thread, [&](int row, int chunk) {
    const RowSource src = row_source(row);
    ptx::cp_async_cg_16(buffer + row * kPitch + 16 * chunk, src.ptr + 16 * chunk,
                        src.valid ? 16u : 0u);
  });
}

// The Q rows of one query token: heads head0 .. head0 + kRows - 1 of `token_q` (a row every
// `head_stride_bytes`) into a swizzled bf16 tile; heads >= h_q are zero-filled from head 0's
// (in-bounds) address. Prefill and decode load each token's head group this way.
template <int kRows, int kChunks, int kThreads>
__device__ __forceinline__ void gather_head_rows(uint32_t tile, int thread, const uint8_t* token_q,
                                                 int64_t head_stride_bytes, int h_q, int head0) {
  gather_rows_swizzled<kRows, kChunks, kThreads>(tile, thread, [&](int row) {
    const int head = head0 + row;
    const bool valid = head < h_q;
    return RowSource{token_q + (valid ? head : 0) * head_stride_bytes, valid};
  });
}

}  // namespace sparse_mla::cuda
