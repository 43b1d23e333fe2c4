// for_each_row_chunk (src/cuda/device/row_chunk_walk.h), the thread -> (row, chunk) map of every
// portable row gather, run on the host: over all kThreads threads, every chunk of the grid is
// visited exactly once, and within each lane group consecutive threads take consecutive chunks
// of one row (the coalescing the gathers rely on). The shapes are the ones the kernels use.
#include "cuda/device/row_chunk_walk.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using sparse_mla::cuda::for_each_row_chunk;

struct Visit {
  int thread, row, chunk;
};

template <int kRows, int kChunks, int kThreads>
void expect_each_chunk_once() {
  SCOPED_TRACE(testing::Message() << kRows << " rows x " << kChunks << " chunks, " << kThreads
                                  << " threads");
  std::vector<int> count(kRows * kChunks, 0);
  std::vector<Visit> visits;
  for (int thread = 0; thread < kThreads; ++thread) {
    for_each_row_chunk<kRows, kChunks, kThreads>(thread, [&](int row, int chunk) {
      ASSERT_GE(row, 0);
      ASSERT_LT(row, kRows);
      ASSERT_GE(chunk, 0);
      ASSERT_LT(chunk, kChunks);
      ++count[row * kChunks + chunk];
      visits.push_back({thread, row, chunk});
    });
  }
  for (int row = 0; row < kRows; ++row) {
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      EXPECT_EQ(count[row * kChunks + chunk], 1) << "row " << row << " chunk " << chunk;
    }
  }
  // Coalescing: threads t and t + 1 of one warp visiting the same row in the same pass take
  // chunks c and c + 1. Each thread's visits come in pass order, so the n-th visit of t and of
  // t + 1 belong to the same pass.
  std::vector<std::vector<Visit>> by_thread(kThreads);
  for (const Visit& v : visits) by_thread[v.thread].push_back(v);
  for (int t = 0; t + 1 < kThreads; ++t) {
    if ((t + 1) % 32 == 0) continue;
    const auto& a = by_thread[t];
    const auto& b = by_thread[t + 1];
    for (size_t n = 0; n < a.size() && n < b.size(); ++n) {
      if (a[n].row == b[n].row) {
        EXPECT_EQ(b[n].chunk, a[n].chunk + 1) << "threads " << t;
      }
    }
  }
}

TEST(RowChunkWalk, EveryChunkOnceForTheKernelsShapes) {
  expect_each_chunk_once<32, 33, 128>();  // v32_fp8 raw rows, 16 x 32 decode tile (528 B)
  expect_each_chunk_once<64, 41, 256>();  // v32_fp8 raw rows, 64-key tiles (656 B)
  expect_each_chunk_once<32, 36, 128>();  // v4_fp8 raw rows, 32-key tiles (576 B)
  expect_each_chunk_once<32, 41, 256>();  // paired head groups: half of a 64-key block
  expect_each_chunk_once<64, 72, 256>();  // bf16 d576 rows into a swizzled tile
  expect_each_chunk_once<64, 72, 128>();  // 16-row prefill KV rows
  expect_each_chunk_once<32, 64, 128>();  // bf16 d512 rows
  expect_each_chunk_once<64, 8, 256>();   // the direct RoPE tail (8 chunks)
  expect_each_chunk_once<16, 72, 128>();  // Q rows
  expect_each_chunk_once<32, 28, 128>();  // 28 = 16 + 8 + 4
}

TEST(RowChunkWalk, RowsNotAMultipleOfThePass) {
  expect_each_chunk_once<17, 33, 128>();
  expect_each_chunk_once<3, 72, 256>();
  expect_each_chunk_once<1, 1, 32>();
  expect_each_chunk_once<5, 300, 128>();  // more chunks than threads
}

}  // namespace
