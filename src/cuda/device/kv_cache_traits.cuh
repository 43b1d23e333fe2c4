// Compile-time view of the KV-cache traits table (include/sparse_mla/kv_cache_format.h) for the
// kernels: byte offsets of a token's quantized values, scales and bf16 tail. Plain constexpr (no
// device code), so host tests check every number against kv_cache_format_info(). A new format
// (V4.1 fp8/fp4) is a new specialisation; the decode kernel's load and dequantise roles read
// only these members.
//
// Addressing, with block = slot / page_block_size, t = slot % page_block_size:
//   data row  = base + block * block_stride + t * kDataRowBytes
//     [0, kQuantDims)           e4m3 values, tile i scaled by scale i (kTileSize values each)
//     [kTailOffset, +2*kTailDims)  bf16 tail (RoPE, or the whole row of a bf16 cache)
//   scales    = kScalesInRow ? data row + kScaleOffset
//                            : base + block * block_stride + page_block_size * kDataRowBytes
//                                   + t * kScaleRowBytes
#pragma once

#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::cuda {

template <KvCacheFormat kFormat, int kDqkValue>
struct KvTraits;

// v32_fp8: 656 B token rows: 512 e4m3 (4 tiles of 128), 4 fp32 scales, 64 bf16 RoPE.
template <>
struct KvTraits<KvCacheFormat::kV32Fp8, 576> {
  static constexpr KvCacheFormat kFormat = KvCacheFormat::kV32Fp8;
  static constexpr int kDqk = 576;
  static constexpr int kQuantDims = 512;
  static constexpr int kTileSize = 128;
  static constexpr int kNumScales = 4;
  static constexpr ScaleEncoding kScaleEncoding = ScaleEncoding::kFloat32;
  static constexpr bool kScalesInRow = true;
  static constexpr int kScaleOffset = 512;
  static constexpr int kScaleRowBytes = 16;
  static constexpr int kDataRowBytes = 656;
  static constexpr int kTailOffset = 528;
  static constexpr int kTailDims = 64;
};

// v4_fp8: per page block, 576 B data rows (448 e4m3 in 7 tiles of 64, then 64 bf16 RoPE), then
// one 8 B scale row per token (7 ue8m0 + 1 pad).
template <>
struct KvTraits<KvCacheFormat::kV4Fp8, 512> {
  static constexpr KvCacheFormat kFormat = KvCacheFormat::kV4Fp8;
  static constexpr int kDqk = 512;
  static constexpr int kQuantDims = 448;
  static constexpr int kTileSize = 64;
  static constexpr int kNumScales = 7;
  static constexpr ScaleEncoding kScaleEncoding = ScaleEncoding::kUe8m0;
  static constexpr bool kScalesInRow = false;
  static constexpr int kScaleOffset = 0;
  static constexpr int kScaleRowBytes = 8;
  static constexpr int kDataRowBytes = 576;
  static constexpr int kTailOffset = 448;
  static constexpr int kTailDims = 64;
};

// bf16: plain rows of kDqk bf16 values (the whole row is the "tail").
template <int kDqkValue>
struct KvTraits<KvCacheFormat::kBf16, kDqkValue> {
  static constexpr KvCacheFormat kFormat = KvCacheFormat::kBf16;
  static constexpr int kDqk = kDqkValue;
  static constexpr int kQuantDims = 0;
  static constexpr int kTileSize = 0;
  static constexpr int kNumScales = 0;
  static constexpr ScaleEncoding kScaleEncoding = ScaleEncoding::kNone;
  static constexpr bool kScalesInRow = true;
  static constexpr int kScaleOffset = 0;
  static constexpr int kScaleRowBytes = 0;
  static constexpr int kDataRowBytes = 2 * kDqkValue;
  static constexpr int kTailOffset = 0;
  static constexpr int kTailDims = kDqkValue;
};

// DeepSeek V4.1 records (SPEC §4), all 512 dims quantized, no bf16 tail; one specialisation per
// (format, page layout), checked against kv_cache_format_info(format, layout) by the host test.
// Addressing, with block and t as above:
//   page_split         data   = base + block * block_stride + t * kDataRowBytes (512 / 256)
//                      scales = base + block * block_stride + pbs * kDataRowBytes + t *
//                      kScaleRowBytes
//   token_interleaved  data   = base + block * block_stride + t * kRecordBytes (528 / 288)
//                      scales = data + kScaleOffset (512 / 256)
// Either way a token is kQuantBytes of values and kNumScales scale bytes, which the decode kernels
// gather into one kRecordBytes raw row [values | scales] (the token_interleaved record).
template <KvCacheFormat kFormatValue, KvLayout kLayoutValue>
struct V41Traits {
  static_assert(kFormatValue == KvCacheFormat::kV41Fp8 || kFormatValue == KvCacheFormat::kV41Fp4);
  static_assert(kLayoutValue == KvLayout::kPageSplit ||
                kLayoutValue == KvLayout::kTokenInterleaved);
  static constexpr KvCacheFormat kFormat = kFormatValue;
  static constexpr KvLayout kLayout = kLayoutValue;
  static constexpr bool kFp4 = kFormatValue == KvCacheFormat::kV41Fp4;
  static constexpr int kDqk = 512;
  static constexpr ValueEncoding kValueEncoding =
      kFp4 ? ValueEncoding::kE2m1 : ValueEncoding::kE4m3;
  static constexpr int kQuantDims = 512;
  static constexpr int kQuantBytes = kFp4 ? 256 : 512;
  static constexpr int kTileSize = kFp4 ? 16 : 32;
  static constexpr int kNumScales = kFp4 ? 32 : 16;
  static constexpr ScaleEncoding kScaleEncoding =
      kFp4 ? ScaleEncoding::kE4m3 : ScaleEncoding::kUe8m0;
  static constexpr int kScaleBytes = 1;
  static constexpr int kRecordBytes = kQuantBytes + kNumScales * kScaleBytes;  // 528 / 288
  static constexpr bool kScalesInRow = kLayoutValue == KvLayout::kTokenInterleaved;
  static constexpr int kDataRowBytes = kScalesInRow ? kRecordBytes : kQuantBytes;
  static constexpr int kScaleOffset = kScalesInRow ? kQuantBytes : 0;
  static constexpr int kScaleRowBytes = kScalesInRow ? 0 : kNumScales * kScaleBytes;
  static constexpr int kTailOffset = kQuantBytes;  // no tail: 0 bf16 values from here
  static constexpr int kTailDims = 0;
  static constexpr int kBlockAlignment = kScalesInRow ? kRecordBytes : kQuantBytes;
};

}  // namespace sparse_mla::cuda
