// The V4.1 rows of a decode block, shared by both V4.1 split kernels (v41_kernel.cuh, where the MMA
// warps run them between CTA barriers, and v41_warp_specialized_kernel.cuh, where producer warps
// do): each slot's addresses by its cache's format and layout (V41Traits), the cp.async gather of
// a record's value and scale bytes into one raw row [values | scales] of 528 bytes (the larger
// record), and the dequantisation of a raw stage into a swizzled bf16 tile (v41_fp8: e4m3 x ue8m0
// as v4_fp8; v41_fp4: e2m1 x e4m3 as an exact bf16 product, fp4_dequant.cuh).
#pragma once

#include <cstdint>

#include "core/params.h"
#include "cuda/decode/piece_inputs.cuh"
#include "cuda/device/fp4_dequant.cuh"
#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/gather.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_decode/config.cuh"

namespace sparse_mla::cuda::portable_decode {

// The raw stage's row as DecodeSmem sees it: 512 value bytes then a 16-B scale row (RawRow: pitch
// 528 = the v41_fp8 record, the larger of the two), a scale pointer per row. A v41_fp4 row uses its
// first 288 bytes: 256 code bytes, then 32 scale bytes at kFp4ScaleBase.
struct V41RawRecord {
  static constexpr KvCacheFormat kFormat = KvCacheFormat::kV41Fp8;
  static constexpr int kDqk = 512;
  static constexpr int kQuantDims = 512;
  static constexpr int kTileSize = 32;
  static constexpr int kNumScales = 16;
  static constexpr ScaleEncoding kScaleEncoding = ScaleEncoding::kUe8m0;
  static constexpr bool kScalesInRow = false;
  static constexpr int kScaleOffset = 0;
  static constexpr int kScaleRowBytes = 16;
  static constexpr int kDataRowBytes = 512;
  static constexpr int kTailOffset = 512;
  static constexpr int kTailDims = 0;
};
static_assert(RawRow<V41RawRecord>::kPitch ==
              V41Traits<KvCacheFormat::kV41Fp8, KvLayout::kPageSplit>::kRecordBytes);

template <bool kFp4>
using V41Record =
    V41Traits<kFp4 ? KvCacheFormat::kV41Fp4 : KvCacheFormat::kV41Fp8, KvLayout::kTokenInterleaved>;

// load (addresses) of one slot with the traits of (format, layout): page_split's data and scale
// rows (slot_rows), or token_interleaved's record and the scales inside it.
template <class Traits>
__device__ __forceinline__ SlotRows v41_slot_rows(const detail::KvCacheParams& cache,
                                                  uint32_t slot) {
  SlotRows rows = slot_rows<Traits>(cache, slot);
  if constexpr (Traits::kScalesInRow) rows.scales = rows.data + Traits::kScaleOffset;
  return rows;
}

// Whether block `block` of a query reads v41_fp4 records (blocks of a v41_fp4 cache: the extra
// cache's of V4.1, or a v41_fp4 main cache's).
__device__ __forceinline__ bool block_is_fp4(const detail::DecodeParams& p, const QueryLists& lists,
                                             int block) {
  const KvCacheFormat format = block < lists.blocks_main ? p.cache.format : p.extra_cache.format;
  return format == KvCacheFormat::kV41Fp4;
}

// load (addresses) of a block's slot: its cache's data row and scale row by the cache's format
// and layout (CTA-uniform), slot 0 for an invalid index (zero-filled, never read).
struct V41SlotRows {
  SlotRows rows;
  bool valid;
};

__device__ __forceinline__ V41SlotRows v41_rows_of(const detail::KvCacheParams& cache,
                                                   int32_t index) {
  const bool valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const uint32_t slot = valid ? static_cast<uint32_t>(index) : 0u;
  const bool split = cache.layout == KvLayout::kPageSplit;
  using enum KvCacheFormat;
  using enum KvLayout;
  SlotRows rows;
  if (cache.format == kV41Fp4) {
    rows = split ? v41_slot_rows<V41Traits<kV41Fp4, kPageSplit>>(cache, slot)
                 : v41_slot_rows<V41Traits<kV41Fp4, kTokenInterleaved>>(cache, slot);
  } else {
    rows = split ? v41_slot_rows<V41Traits<kV41Fp8, kPageSplit>>(cache, slot)
                 : v41_slot_rows<V41Traits<kV41Fp8, kTokenInterleaved>>(cache, slot);
  }
  return {rows, valid};
}

// load (rows): kRows rows' value bytes, then their scale bytes, into a raw stage (`raw`,
// shared::cta address) of [kRows, 528] as [values | scales], over kThreads threads; rows whose
// `valid` flag is 0 are zero-filled from their in-bounds slot-0 addresses.
template <int kThreads, int kRows, bool kFp4>
__device__ __forceinline__ void gather_v41_rows(uint32_t raw, int thread,
                                                const uint8_t* const* row_ptr,
                                                const uint8_t* const* scale_ptr,
                                                const uint8_t* valid) {
  using Record = V41Record<kFp4>;
  constexpr int kPitch = RawRow<V41RawRecord>::kPitch;
  gather_rows_linear<kRows, Record::kQuantBytes / 16, kPitch, kThreads>(raw, thread, [&](int r) {
    return RowSource{row_ptr[r], valid[r] != 0};
  });
  gather_rows_linear<kRows, Record::kNumScales / 16, kPitch, kThreads>(
      raw + Record::kQuantBytes, thread, [&](int r) {
        return RowSource{scale_ptr[r], valid[r] != 0};
      });
}

// dequantise: sm.raw[raw_stage] -> the swizzled bf16 tile sm.kv[tile_stage] (members of the
// kernel's shared-memory struct, as dequantize_rows takes them), Shape::kThreads threads (the
// split kernel's CTA, or a producer group of 128). Thread t owns chunk c = t % 64 (8
// dims) of rows r0 + kRowsPerPass * i (r0 = t / 64), as dequantize_rows (raw_rows.cuh) does for
// the other FP8 formats, 4 rows' raw bytes and scales loaded before they are converted and stored.
// v41_fp8: 8 e4m3 bytes at 8 c, ue8m0 scale byte 512 + c / 4. v41_fp4: 4 code bytes at 4 c, e4m3
// scale byte 256 + c / 2.
template <class Shape, bool kFp4, class Smem>
__device__ __forceinline__ void dequantize_v41_rows(int thread, Smem& sm, int raw_stage,
                                                    int tile_stage) {
  using Record = V41Record<kFp4>;
  constexpr int kPitch = RawRow<V41RawRecord>::kPitch;
  constexpr int kLanes = 64;
  constexpr int kRowsPerPass = Shape::kThreads / kLanes;
  constexpr int kRows = Shape::kBlockKeys;
  static_assert(Shape::kChunksPerRow == kLanes, "512 dims = 64 chunks, all quantized");
  static_assert(kRowsPerPass == 2 || kRowsPerPass == 4, "the swizzle phases assume 2 or 4");
  constexpr int kRowsPerThread = kRows / kRowsPerPass;
  constexpr int kBatch = 4;
  static_assert(kRowsPerThread % kBatch == 0);
  uint8_t* tile = sm.kv[tile_stage];
  const int chunk = thread % kLanes;
  const int row0 = thread / kLanes;
  const uint32_t column_base =
      static_cast<uint32_t>((chunk >> 3) * (Shape::kBlockKeys * 128) + row0 * 128);
  const uint32_t swizzle = static_cast<uint32_t>(((chunk & 7) ^ (row0 & 7)) << 4);
  auto tile_offset = [&](int i) {
    return column_base + static_cast<uint32_t>(128 * kRowsPerPass * i) +
           (swizzle ^ static_cast<uint32_t>(((kRowsPerPass * i) & 7) << 4));
  };
  const uint8_t* raw_rows = sm.raw[raw_stage] + row0 * kPitch;
  const uint8_t* scales = raw_rows + Record::kQuantBytes + chunk * 8 / Record::kTileSize;
  constexpr int kStep = kRowsPerPass * kPitch;
#pragma unroll
  for (int i0 = 0; i0 < kRowsPerThread; i0 += kBatch) {
    uint2 raw[kBatch];
    uint32_t scale_byte[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j;
      if constexpr (kFp4) {
        raw[j].x = *reinterpret_cast<const uint32_t*>(raw_rows + 4 * chunk + i * kStep);
      } else {
        raw[j] = *reinterpret_cast<const uint2*>(raw_rows + 8 * chunk + i * kStep);
      }
      scale_byte[j] = scales[i * kStep];
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      uint4 value;
      if constexpr (kFp4) {
        value = dequant_e2m1x8(raw[j].x, e4m3_scale_bf16x2(scale_byte[j]));
      } else {
        value = dequant_e4m3x8(raw[j], ue8m0_to_float(scale_byte[j]));
      }
      *reinterpret_cast<uint4*>(tile + tile_offset(i0 + j)) = value;
    }
  }
}

}  // namespace sparse_mla::cuda::portable_decode
