// for_each_row_chunk: which thread copies which 16-B chunk of a [rows, chunks] grid, with no
// division. Plain C++ apart from SMLA_HOST_DEVICE, so the CPU tests check that every chunk is
// visited exactly once (tests/cpp/row_chunk_walk_test.cpp); the row gathers (gather.cuh) use it.
#pragma once

#include "core/host_device.h"

namespace sparse_mla::cuda {

// Visits every (row, chunk) of a [kRows, kChunks] grid once over kThreads threads (a power of two)
// with no division: the first kLanes chunks of every row (kLanes: the largest power of two <=
// min(kChunks, kThreads)) go one per lane, thread t taking chunk t % kLanes of rows t / kLanes,
// t / kLanes + kThreads / kLanes, ...; the chunks after them are visited the same way, recursively
// (33 chunks: 32 + 1; 72: 64 + 8; 28: 16 + 8 + 4). Consecutive threads still take consecutive
// chunks of one row, and each thread's rows and chunks are compile-time offsets from its first.
// Measured (ncu, 16-row v32_fp8 decode, 32 rows x 33 chunks): the flat loop it replaced,
// c -> (c / 33, c % 33) over c = thread + 128 i, spent ~15 instructions per 16-B copy.
template <int kRows, int kChunks, int kThreads, int kChunk0 = 0, class Visit>
SMLA_HOST_DEVICE inline void for_each_row_chunk(int thread, Visit&& visit) {
  static_assert(kThreads > 0 && (kThreads & (kThreads - 1)) == 0, "kThreads: a power of two");
  static_assert(kRows > 0 && kChunks >= 0);
  if constexpr (kChunks > 0) {
    constexpr int kBound = kChunks < kThreads ? kChunks : kThreads;
    constexpr int kLanes = 1 << (31 - __builtin_clz(static_cast<unsigned>(kBound)));
    constexpr int kRowsPerPass = kThreads / kLanes;
    const int chunk = kChunk0 + (thread & (kLanes - 1));
    const int row0 = thread / kLanes;
    // Unrolled by 4, not fully: the decode kernels issue the next block's gather with the
    // accumulators live, at their register caps. nvcc 13.0, sm_90a: full unrolling spilled 4-28 B
    // in the 16-row FP8 tiles (168-register cap); by 4 none spills but v4fp8_h16_k32 (4 B, was 8),
    // v4fp8_h64_k32 (8 B, was 4) and bf16d576_h64 (32 B, was 0); v32fp8_h64 no longer spills (was
    // 12).
#if defined(__CUDACC__)
#pragma unroll 4
#endif
    for (int r = 0; r < kRows; r += kRowsPerPass) {
      if (kRows % kRowsPerPass == 0 || row0 + r < kRows) visit(row0 + r, chunk);
    }
    for_each_row_chunk<kRows, kChunks - kLanes, kThreads, kChunk0 + kLanes>(thread, visit);
  }
}

}  // namespace sparse_mla::cuda
