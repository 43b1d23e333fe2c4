// The FP8 rows of a decode block, shared by both split kernels (kernel.cuh, where the MMA warps
// run them between CTA barriers, and warp_specialized_kernel.cuh, where producer warps do): the
// cp.async gather of raw token bytes into a [keys, kPitch] stage (config.cuh RawRow), and the
// dequantisation of a stage into a swizzled bf16 tile.
#pragma once

#include <cstdint>

#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/gather.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_decode/config.cuh"

namespace sparse_mla::cuda::portable_decode {

// load (rows): kRows raw token rows [row_base, row_base + kRows) of a block into `raw` ([keys,
// kPitch] bytes, shared::cta address) with cp.async: the data row (16-B copies, consecutive threads
// on consecutive chunks) and, for split-scale formats, the 8-B scale row after it. Rows whose
// `valid` flag is 0 are zero-filled from their (in-bounds) slot-0 address.
template <class Shape, class Traits, int kRows>
__device__ __forceinline__ void gather_raw_rows(uint32_t raw, int thread,
                                                const uint8_t* const* row_ptr,
                                                const uint8_t* const* scale_ptr,
                                                const uint8_t* valid, int row_base = 0) {
  using Raw = RawRow<Traits>;
  gather_rows_linear<kRows, Traits::kDataRowBytes / 16, Raw::kPitch, Shape::kThreads>(
      raw + row_base * Raw::kPitch, thread, [&](int r) {
        return RowSource{row_ptr[row_base + r], valid[row_base + r] != 0};
      });
  if constexpr (!Traits::kScalesInRow) {
    static_assert(Traits::kScaleRowBytes == 8, "scale rows are copied with one 8-B cp.async");
    if (thread < kRows) {
      const int row = row_base + thread;
      ptx::cp_async_ca_8(raw + row * Raw::kPitch + Traits::kDataRowBytes, scale_ptr[row],
                         valid[row] != 0 ? 8u : 0u);
    }
  }
}

// dequantise: sm.raw[raw_stage] ([keys, kPitch] raw bytes) -> sm.kv[tile_stage] (swizzled bf16;
// the stages are members of the kernel's shared-memory struct, not pointers: with two pointer
// arguments nvcc no longer knew that the tile stores do not alias the raw loads, and scheduled
// the split kernel differently). Shape::kThreads threads. A unit is one 16-B tile chunk (8 dims):
// an e4m3 chunk times its tile's scale, or a copied chunk of the bf16 tail. Zero-filled (invalid)
// rows have zero data and zero scales, so they dequantise to 0. Mapping: thread t owns chunk
// c = t % 64 of rows r0 + kRowsPerPass * i (r0 = t / 64; chunks 0..63: v32_fp8's 64 e4m3 chunks,
// v4_fp8's 56 e4m3 + 8 tail chunks), then the chunks past 64 (v32_fp8's 8 tail chunks) are
// shared out. The row loop is fully unrolled and every address is a per-thread base plus a
// compile-time offset: the swizzle term (c ^ row) & 7 of row r0 + kRowsPerPass * i is
// (c ^ r0) ^ ((kRowsPerPass * i) & 7) (r0 < kRowsPerPass, a power of 2), so a thread needs only
// 8 / kRowsPerPass distinct swizzled column offsets.
// Measured (ncu source view, nvcc 13.0): the first version's flat u -> (u / 72, u % 72) loop
// spent ~50 instructions per chunk, half of the split kernel's; the fixed-chunk loop that followed
// (unrolled by 4, addresses recomputed per row, a branch in the ue8m0 decode) still spent ~43
// and was 52 % of the 16-row kernel's instructions.
// Paired head groups: this CTA dequantises rows [row_base, row_base + kBlockKeys / 2) and stores
// each chunk twice, into its own tile and (st.async) at the same offset of the peer's tile
// `peer_tile`, counting 16 bytes on the peer's mbarrier `peer_barrier` (shared::cluster
// addresses).
template <class Shape, class Traits, bool kPaired = false, class Smem>
__device__ __forceinline__ void dequantize_rows(int thread, Smem& sm, int raw_stage, int tile_stage,
                                                int row_base = 0, uint32_t peer_tile = 0,
                                                uint32_t peer_barrier = 0) {
  using Raw = RawRow<Traits>;
  constexpr int kLanes = 64;  // chunk slots of a row in the first pass
  constexpr int kQuantChunks = Traits::kQuantDims / 8;
  constexpr int kRowsPerPass = Shape::kThreads / kLanes;
  constexpr int kLateChunks = Shape::kChunksPerRow - kLanes;  // chunks >= 64: 8 (d576) or 0
  constexpr int kRows = kPaired ? Shape::kBlockKeys / 2 : Shape::kBlockKeys;
  static_assert(Shape::kThreads % kLanes == 0 && kRows % kRowsPerPass == 0);
  static_assert(kRowsPerPass == 2 || kRowsPerPass == 4, "the swizzle phases assume 2 or 4");
  static_assert(kQuantChunks <= kLanes && kLateChunks >= 0);
  constexpr int kRowsPerThread = kRows / kRowsPerPass;
  // Rows whose raw bytes are loaded before the first of them is stored: the tile stores may alias
  // the raw loads as far as the compiler knows, so without the batch every chunk waits out its own
  // shared-memory load latency (ncu, 16-row v32_fp8 kernel: short-scoreboard stalls on the first
  // use of each load were 39 % of the dequantisation's samples). 4 rows: 12 registers of raw
  // bytes and scales, and no 16-row FP8 tile spills more at its 168-register cap (2 rows did).
  constexpr int kBatch = 4;
  static_assert(kRowsPerThread % kBatch == 0);
  uint8_t* tile = sm.kv[tile_stage];
  auto store = [&](uint32_t offset, uint4 value) {
    *reinterpret_cast<uint4*>(tile + offset) = value;
    if constexpr (kPaired) ptx::st_async_16(peer_tile + offset, value, peer_barrier);
  };
  const int chunk = thread % kLanes;
  const int row0 = row_base + thread / kLanes;  // row_base is a multiple of 8
  // Tile offset of (row0 + kRowsPerPass * i, chunk) = column_base + 128 * kRowsPerPass * i +
  // (swizzle ^ (((kRowsPerPass * i) & 7) << 4)).
  const uint32_t column_base =
      static_cast<uint32_t>((chunk >> 3) * (Shape::kBlockKeys * 128) + row0 * 128);
  const uint32_t swizzle = static_cast<uint32_t>(((chunk & 7) ^ (row0 & 7)) << 4);
  auto tile_offset = [&](int i) {
    return column_base + static_cast<uint32_t>(128 * kRowsPerPass * i) +
           (swizzle ^ static_cast<uint32_t>(((kRowsPerPass * i) & 7) << 4));
  };
  const uint8_t* raw_rows = sm.raw[raw_stage] + row0 * Raw::kPitch;
  if (chunk < kQuantChunks) {
    const uint8_t* scales = raw_rows + Raw::kScaleBase +
                            (Traits::kScaleEncoding == ScaleEncoding::kFloat32 ? 4 : 1) *
                                (chunk * 8 / Traits::kTileSize);
    const uint8_t* data = raw_rows + 8 * chunk;
    constexpr int kStep = kRowsPerPass * Raw::kPitch;
#pragma unroll
    for (int i0 = 0; i0 < kRowsPerThread; i0 += kBatch) {
      uint2 raw[kBatch];
      float scale[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = i0 + j;
        raw[j] = *reinterpret_cast<const uint2*>(data + i * kStep);
        if constexpr (Traits::kScaleEncoding == ScaleEncoding::kFloat32) {
          scale[j] = *reinterpret_cast<const float*>(scales + i * kStep);
        } else {
          scale[j] = ue8m0_to_float(scales[i * kStep]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) store(tile_offset(i0 + j), dequant_e4m3x8(raw[j], scale[j]));
    }
  } else {
    const uint8_t* tail = raw_rows + Traits::kTailOffset + 16 * (chunk - kQuantChunks);
#pragma unroll
    for (int i0 = 0; i0 < kRowsPerThread; i0 += kBatch) {
      uint4 bytes[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        bytes[j] = *reinterpret_cast<const uint4*>(tail + (i0 + j) * kRowsPerPass * Raw::kPitch);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) store(tile_offset(i0 + j), bytes[j]);
    }
  }
  if constexpr (kLateChunks > 0) {
    static_assert(kQuantChunks == kLanes, "chunks past 64 are tail chunks");
    constexpr int kLateUnits = kRows * kLateChunks;
#pragma unroll
    for (int i = 0; i < (kLateUnits + Shape::kThreads - 1) / Shape::kThreads; ++i) {
      const int u = thread + i * Shape::kThreads;
      if (kLateUnits % Shape::kThreads == 0 || u < kLateUnits) {
        const int row = row_base + u / kLateChunks;
        const int late = u % kLateChunks;
        store(tile_chunk_offset<Shape::kBlockKeys>(row, kLanes + late),
              *reinterpret_cast<const uint4*>(sm.raw[raw_stage] + row * Raw::kPitch +
                                              Traits::kTailOffset + 16 * late));
      }
    }
  }
}

}  // namespace sparse_mla::cuda::portable_decode
