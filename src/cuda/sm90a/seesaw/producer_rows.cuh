// Where a producer thread of the Hopper seesaw kernels puts rows into a [64, d_qk] bf16 tile of
// 128-B swizzled panels (seesaw/config.cuh), and the cp.async copy of bf16 rows (Q, bf16 KV) that
// the prefill and the decode producers share.
#pragma once

#include <cstdint>

#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a {

// Producer thread t (0..127) copies 16-B chunk t % 8 of every 128-B panel row of rows
// t / 8 + 16 r, r < 4: a group of 8 threads reads one 128-B run of a row, and as 16 is a multiple
// of the swizzle period the chunk's XOR (row % 8) is the same for all four rows.
struct ProducerPlace {
  int group, chunk;  // rows group + 16 r; chunk within each 64-dim panel
  uint32_t swizzled_chunk_bytes;
  __device__ __forceinline__ explicit ProducerPlace(int t)
      : group(t >> 3), chunk(t & 7), swizzled_chunk_bytes(((t & 7) ^ ((t >> 3) & 7)) << 4) {}
};

// Panels [kFirst, kEnd) of the thread's rows at.group + 16 r, r < kRowGroups, of a
// [16 kRowGroups, d_qk] tile whose panels lie kPanelStride bytes apart (a [64, d_qk] tile: 4 and
// kPanelBytes; the heads-in-N kernels' Q tile of 16 or 32 rows: 1 or 2 and 128 x its rows);
// row_source(r) gives row r's readable address and whether it is valid (zero-filled where not).
// Called per row, so that only one row's address is live at a time (the producer runs in 72
// registers).
template <int kFirst, int kEnd, int kRowGroups = 4, int kPanelStride = kPanelBytes, class RowSource>
__device__ __forceinline__ void copy_rows(uint32_t tile, const ProducerPlace& at,
                                          RowSource&& row_source) {
#pragma unroll
  for (int r = 0; r < kRowGroups; ++r) {
    const uint32_t row_base = tile + (at.group + 16 * r) * 128 + at.swizzled_chunk_bytes;
    bool valid;
    const uint8_t* row_src = row_source(r, &valid) + 16 * at.chunk;
#pragma unroll
    for (int panel = kFirst; panel < kEnd; ++panel) {
      ptx::cp_async_cg_16(row_base + panel * kPanelStride, row_src + 128 * panel, valid ? 16u : 0u);
    }
  }
}

}  // namespace sparse_mla::cuda::sm90a
