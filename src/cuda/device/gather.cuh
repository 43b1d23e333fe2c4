// Row gathers with cp.async for the portable kernels: every thread of the CTA issues 16-B
// copies of gathered rows, consecutive threads taking consecutive chunks of one row (coalesced
// 128-B segments). A row whose source is invalid is zero-filled (src_size 0) from an address the
// caller has already clamped in bounds, so invalid indices are never dereferenced.
#pragma once

#include <cstdint>

#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/smem_tile.cuh"

namespace sparse_mla::cuda {

// A row to gather: `ptr` always points at readable memory; `valid` = copy, else zero-fill.
struct RowSource {
  const uint8_t* ptr;
  bool valid;
};

// Visits every (row, chunk) of a [kRows, kChunks] grid once over kThreads threads (a power of two)
// with no division: the first kLanes chunks of every row (kLanes: the largest power of two <=
// min(kChunks, kThreads)) go one per lane, thread t taking chunk t % kLanes of rows t / kLanes,
// t / kLanes + kThreads / kLanes, ...; the chunks after them are visited the same way, recursively
// (33 chunks: 32 + 1; 72: 64 + 8; 28: 16 + 8 + 4). Consecutive threads still take consecutive
// chunks of one row, and each thread's rows and chunks are compile-time offsets from its first.
// Measured (ncu, 16-row v32_fp8 decode, 32 rows x 33 chunks): the flat loop it replaces,
// c -> (c / 33, c % 33) over c = thread + 128 i, spent ~15 instructions per 16-B copy.
template <int kRows, int kChunks, int kThreads, int kChunk0 = 0, class Visit>
__device__ __forceinline__ void for_each_row_chunk(int thread, Visit&& visit) {
  static_assert(kThreads > 0 && (kThreads & (kThreads - 1)) == 0, "kThreads: a power of two");
  if constexpr (kChunks > 0) {
    constexpr int kBound = kChunks < kThreads ? kChunks : kThreads;
    constexpr int kLanes = 1 << (31 - __builtin_clz(static_cast<unsigned>(kBound)));
    constexpr int kRowsPerPass = kThreads / kLanes;
    const int chunk = kChunk0 + (thread & (kLanes - 1));
    const int row0 = thread / kLanes;
    // Unrolled by 4, not fully: the decode kernels issue the next block's gather with the
    // accumulators live, at their register caps. nvcc 13.0, sm_90a: full unrolling spilled 4-28 B
    // in the 16-row FP8 tiles (168-register cap); by 4 none spills but v4fp8_h16_k32 (4 B, was 8),
    // v4fp8_h64_k32 (8 B, was 4) and bf16d576_h64 (32 B, was 0); v32fp8_h64 no longer spills (was 12).
#pragma unroll 4
    for (int r = 0; r < kRows; r += kRowsPerPass) {
      if (kRows % kRowsPerPass == 0 || row0 + r < kRows) visit(row0 + r, chunk);
    }
    for_each_row_chunk<kRows, kChunks - kLanes, kThreads, kChunk0 + kLanes>(thread, visit);
  }
}

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

}  // namespace sparse_mla::cuda
