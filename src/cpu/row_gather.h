// Gathering KV rows for the CPU back end: software prefetch of rows a few slots ahead (random
// rows defeat the hardware prefetcher, and a tile consumes a row in well under a DRAM latency),
// bf16 -> fp32 rows, and a cache-row dequantizer for any format of the traits table: e4m3 tiles
// (v32_fp8, v4_fp8, v41_fp8) vectorised, e2m1 pairs (v41_fp4) through a byte -> two-value table,
// plain bf16. It computes the same fp32 values as KvTokenReader (code value * scale in fp32, bf16
// tail widened).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/params.h"
#include "cpu/fp8.h"
#include "cpu/simd.h"

namespace sparse_mla::cpu {

// Rows prefetched ahead of the one being read: 8 rows of ~1 KB keep ~8 DRAM misses in flight,
// enough to hide a ~100 ns miss behind the tile work of the rows before it.
inline constexpr int kPrefetchRows = 8;
inline constexpr int kCacheLine = 64;
inline constexpr int kMaxRowDims = 576;  // the largest d_qk of any format

// [256][2] fp32: the two e2m1 values of a byte, low nibble first.
inline constexpr std::array<std::array<float, 2>, 256> kE2m1Pairs = [] {
  std::array<std::array<float, 2>, 256> table{};
  for (int b = 0; b < 256; ++b) table[b] = {kE2m1ToFloat[b & 0xf], kE2m1ToFloat[b >> 4]};
  return table;
}();

inline void prefetch_bytes(const uint8_t* p, int64_t bytes) {
  for (int64_t offset = 0; offset < bytes; offset += kCacheLine) __builtin_prefetch(p + offset);
}

// dst[0, n) = src[0, n) widened from bf16 (vectorised by the compiler: shifts only).
inline void bf16_to_float_row(const uint16_t* src, int n, float* dst) {
  for (int i = 0; i < n; ++i) dst[i] = bf16_to_float_inline(src[i]);
}

// Reads rows of one paged cache as fp32. Slots must be valid (0 <= slot < num_slots).
class CacheRowReader {
 public:
  explicit CacheRowReader(const detail::KvCacheParams& cache)
      : data_(cache.data),
        layout_(cache.format, cache.layout, cache.page_block_size, cache.block_stride_bytes,
                cache.d_qk) {}

  void prefetch(int64_t slot) const {
    prefetch_bytes(data_ + layout_.data_offset(slot), layout_.data_row_bytes);
    if (layout_.num_scales > 0) __builtin_prefetch(data_ + layout_.scale_byte_offset(slot));
  }

  // row: [d_qk] fp32.
  void read(int64_t slot, float* row) const {
    const uint8_t* data = data_ + layout_.data_offset(slot);
    if (layout_.num_scales > 0) {
      const uint8_t* scale_bytes = data_ + layout_.scale_byte_offset(slot);
      for (int tile = 0; tile < layout_.num_scales; ++tile) {
        const float scale = layout_.scale_encoding == ScaleEncoding::kFloat32
                                ? load_float(scale_bytes + 4 * tile)
                            : layout_.scale_encoding == ScaleEncoding::kE4m3
                                ? kE4m3ToFloat[scale_bytes[tile]]
                                : ue8m0_to_float_inline(scale_bytes[tile]);
        if (layout_.value_encoding == ValueEncoding::kE2m1) {
          dequantize_e2m1_tile(data + tile * layout_.tile_size / 2, layout_.tile_size, scale,
                               row + tile * layout_.tile_size);
        } else {
          dequantize_tile(data + tile * layout_.tile_size, layout_.tile_size, scale,
                          row + tile * layout_.tile_size);
        }
      }
    }
    uint16_t tail[kMaxRowDims];  // the bf16 tail may be unaligned in the row
    std::memcpy(tail, data + layout_.tail_offset, sizeof(uint16_t) * layout_.tail_dims);
    bf16_to_float_row(tail, layout_.tail_dims, row + layout_.quantized_dims);
  }

 private:
  static float load_float(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }

  // out[0, n) = e2m1 values of the n / 2 bytes at q (value 2i in the low nibble of byte i) *
  // scale: each byte through kE2m1Pairs, then one vector multiply per kLanes values.
  static void dequantize_e2m1_tile(const uint8_t* q, int n, float scale, float* out) {
    for (int i = 0; i < n / 2; ++i) std::memcpy(out + 2 * i, kE2m1Pairs[q[i]].data(), 8);
    const simd::VecF vscale = simd::splat(scale);
    for (int i = 0; i + simd::kLanes <= n; i += simd::kLanes) {
      simd::store(out + i, simd::load(out + i) * vscale);
    }
    for (int i = n / simd::kLanes * simd::kLanes; i < n; ++i) out[i] *= scale;
  }

  // out[0, n) = e4m3(q[0, n)) * scale; n is a multiple of kLanes (tile sizes are 32, 64, 128).
  static void dequantize_tile(const uint8_t* q, int n, float scale, float* out) {
    using simd::kLanes;
    using simd::VecF;
    using simd::VecI;
    typedef uint8_t VecB __attribute__((vector_size(kLanes)));
    const VecF vscale = simd::splat(scale);
    for (int i = 0; i < n; i += kLanes) {
      VecB bytes;
      std::memcpy(&bytes, q + i, sizeof bytes);
      const VecI code = __builtin_convertvector(bytes, VecI);
      const VecI magnitude = code & 0x7f;
      // Normal codes: move exponent and mantissa into fp32 position and rebias (7 -> 127).
      // Subnormal codes (exponent 0): m * 2^-9. 0x7f: NaN.
      const VecI normal_bits = (magnitude << 20) + (120 << 23);
      VecF normal;
      std::memcpy(&normal, &normal_bits, sizeof normal);
      const VecF subnormal = __builtin_convertvector(magnitude, VecF) * 0x1p-9f;
      VecF value = magnitude < 8 ? subnormal : normal;
      value = magnitude == 0x7f ? simd::splat(std::numeric_limits<float>::quiet_NaN()) : value;
      VecI bits;
      std::memcpy(&bits, &value, sizeof bits);
      bits |= (code & 0x80) << 24;  // sign
      std::memcpy(&value, &bits, sizeof value);
      simd::store(out + i, value * vscale);
    }
  }

  const uint8_t* data_;
  KvTokenLayout layout_;
};

}  // namespace sparse_mla::cpu
