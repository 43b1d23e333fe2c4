// Inline scalar number formats for host hot loops (e4m3fn, e2m1, ue8m0, bf16), the quantizer's
// tile-scale rules, and the KV-cache token reader the CPU back end and the reference call for
// every gathered row.
// The reader resolves a format's traits row (kv_cache_format.h) once, in its constructor, into
// byte strides; reading a token is then the same code for every format: decode the scales (fp32,
// ue8m0 or e4m3), run each e4m3 byte (or each e2m1 nibble) through a table times the tile's fp32
// scale, copy the bf16 tail.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/e2m1.h"
#include "core/params.h"
#include "core/ue8m0.h"
#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::cpu {

// ---- scalar conversions --------------------------------------------------------------------

inline constexpr float kE4m3Max = 448.0f;

namespace detail_fp8 {
// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN.
constexpr float e4m3_value(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float magnitude = exponent == 0 ? static_cast<float>(mantissa) / 512.0f  // m * 2^-9
                                  : static_cast<float>(8 + mantissa) / 8.0f;
  for (int e = 7; e < exponent; ++e) magnitude *= 2.0f;  // 2^(exponent - 7), exact
  for (int e = exponent; e < 7 && exponent != 0; ++e) magnitude /= 2.0f;
  return (bits & 0x80) ? -magnitude : magnitude;
}

constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = e4m3_value(static_cast<uint8_t>(i));
  return table;
}
}  // namespace detail_fp8

// [256] fp32: the value of every e4m3fn code (0x7f and 0xff are NaN).
inline constexpr std::array<float, 256> kE4m3ToFloat = detail_fp8::make_e4m3_table();

inline float e4m3_to_float_inline(uint8_t bits) { return kE4m3ToFloat[bits]; }

// Round to nearest even; |x| >= 448 (and +-inf) saturates to +-448; NaN -> 0x7f.
inline uint8_t float_to_e4m3_inline(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7f;
  const float abs_x = std::bit_cast<float>(abs_bits);
  if (abs_x >= kE4m3Max) return sign | 0x7e;
  if (abs_x < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9; 8 * 2^-9 (a round-up to the smallest normal) is code
    // 0x08, so the integer is the code. x * 512 is exact; nearbyint rounds half to even.
    return sign | static_cast<uint8_t>(std::nearbyint(abs_x * 512.0f));
  }
  // Normal: rebias the exponent from 127 to 7 and round the mantissa from 23 to 3 bits, half to
  // even (add 0x7ffff plus the lowest kept bit, then truncate).
  const uint32_t lowest_kept = (abs_bits >> 20) & 1u;
  const uint32_t rounded = abs_bits - (120u << 23) + 0x7ffffu + lowest_kept;
  return sign | static_cast<uint8_t>(rounded >> 20);
}

// e2m1 (v41_fp4): the value of a 4-bit code (core/e2m1.h), and the code of an fp32 value (round to
// nearest even, saturating to +-6, NaN -> 0, sign kept otherwise).
constexpr float e2m1_to_float_inline(uint8_t code) {
  return std::bit_cast<float>(::sparse_mla::detail::e2m1_fp32_bits(code));
}
inline uint8_t float_to_e2m1_inline(float x) {
  return ::sparse_mla::detail::e2m1_code_of_fp32_bits(std::bit_cast<uint32_t>(x));
}

// [16] fp32: the value of every e2m1 code.
inline constexpr std::array<float, 16> kE2m1ToFloat = [] {
  std::array<float, 16> table{};
  for (int i = 0; i < 16; ++i) table[i] = e2m1_to_float_inline(static_cast<uint8_t>(i));
  return table;
}();

// ue8m0: 2^(byte - 127), 0 -> 2^-127, 0xff -> NaN; the bit rule (core/ue8m0.h) is the CUDA
// kernels' too.
inline float ue8m0_to_float_inline(uint8_t bits) {
  return std::bit_cast<float>(::sparse_mla::detail::ue8m0_fp32_bits(bits));
}

// The ue8m0 code of the smallest power of two >= s (s > 0). NaN and +inf give 0xff (NaN);
// s <= 2^-127 gives 0. For the quantizer's power-of-two scales this is exact.
inline uint8_t ue8m0_ceil_inline(float s) {
  if (!(s <= std::numeric_limits<float>::max())) return 0xff;  // NaN, +inf
  if (s <= 0x1p-127f) return 0;
  int exponent = 0;
  const float mantissa = std::frexp(s, &exponent);  // s = mantissa * 2^exponent, [0.5, 1)
  const int log2_ceil = mantissa == 0.5f ? exponent - 1 : exponent;
  return log2_ceil + 127 >= 0xff ? 0xff : static_cast<uint8_t>(log2_ceil + 127);
}

inline float bf16_to_float_inline(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest even; NaN stays a (quiet) NaN of the same sign.
inline uint16_t float_to_bf16_inline(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The reference quantizer's tile scale: max(amax / 448, 1e-4) rounded up to a power of two.
// A NaN amax gives a NaN scale (as torch's max/clamp/log2 chain does); +inf gives +inf.
inline float quantizer_tile_scale(float amax) {
  if (std::isnan(amax)) return std::numeric_limits<float>::quiet_NaN();
  const float raw = std::fmax(amax / kE4m3Max, 1e-4f);
  if (std::isinf(raw)) return raw;
  int exponent = 0;
  const float mantissa = std::frexp(raw, &exponent);
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kFp4MinScale = 0x1p-9f;  // the smallest e4m3 (subnormal) value

// The v41_fp4 quantizer's tile scale byte: e4m3(clamp(amax / 6, 2^-9, 448)), the division in
// fp32 and the e4m3 conversion round-to-nearest-even, so the byte is a finite, non-zero e4m3
// (amax = 0 gives 2^-9, code 0x01; amax = +inf gives 448, code 0x7e). A tile holding NaN gets
// the e4m3 NaN 0x7f (`has_nan`; amax itself is taken with fmax, which skips NaN).
inline uint8_t fp4_tile_scale_byte(float amax, bool has_nan) {
  if (has_nan || std::isnan(amax)) return 0x7f;
  const float raw = amax / kE2m1Max;
  return float_to_e4m3_inline(raw < kFp4MinScale ? kFp4MinScale : raw > kE4m3Max ? kE4m3Max : raw);
}

// ---- token addressing and reading ----------------------------------------------------------

// Where one token's bytes lie, for any format of the traits table: all layouts reduce to
//   data  = block + t * data_row_bytes
//   scale = block + scale_block_offset + t * scale_token_stride + scale_offset
//   tail  = data + tail_offset   (bf16 values that are not quantized: RoPE, or the whole bf16 row)
// with block = base + (slot / page_block_size) * block_stride, t = slot % page_block_size.
struct KvTokenLayout {
  int64_t page_block_size = 0;
  int64_t block_stride = 0;
  int64_t data_row_bytes = 0;
  int64_t scale_block_offset = 0;
  int64_t scale_token_stride = 0;
  int64_t scale_offset = 0;
  int64_t tail_offset = 0;
  int d_qk = 0;
  ValueEncoding value_encoding = ValueEncoding::kNone;
  int quantized_dims = 0;
  int quantized_bytes = 0;  // bytes of the quantized values: quantized_dims (e4m3), half (e2m1)
  int tile_size = 0;
  int num_scales = 0;
  int tail_dims = 0;        // d_qk - quantized_dims
  int scale_bytes = 0;      // bytes of one scale: 4 (fp32), 1 (ue8m0, e4m3), 0 (none)
  int scale_row_bytes = 0;  // bytes reserved per token for scales (padding included)
  ScaleEncoding scale_encoding = ScaleEncoding::kNone;

  KvTokenLayout() = default;
  KvTokenLayout(KvCacheFormat format, KvLayout kv_layout, int64_t pbs, int64_t stride, int dims) {
    const KvCacheFormatInfo& info = kv_cache_format_info(format, kv_layout);
    page_block_size = pbs;
    block_stride = stride;
    d_qk = dims;
    value_encoding = info.value_encoding;
    quantized_dims = info.quantized_dims;
    quantized_bytes = info.quantized_bytes;
    tile_size = info.tile_size;
    num_scales = info.num_scales;
    tail_dims = d_qk - quantized_dims;
    scale_encoding = info.scale_encoding;
    scale_bytes = info.scale_bytes;
    data_row_bytes = info.data_row_bytes != 0 ? info.data_row_bytes : 2 * int64_t{d_qk};
    tail_offset = info.tail_offset;
    if (info.layout == KvLayout::kPageSplit) {
      scale_block_offset = page_block_size * data_row_bytes;
      scale_token_stride = info.scale_row_bytes;
      scale_offset = 0;
      scale_row_bytes = info.scale_row_bytes;
    } else {
      scale_block_offset = 0;
      scale_token_stride = data_row_bytes;
      scale_offset = info.scale_offset_in_row;
      scale_row_bytes = num_scales * scale_bytes;
    }
  }

  int64_t block_of(int64_t slot) const { return slot / page_block_size; }
  int64_t data_offset(int64_t slot) const {
    return block_of(slot) * block_stride + (slot % page_block_size) * data_row_bytes;
  }
  int64_t scale_byte_offset(int64_t slot) const {
    return block_of(slot) * block_stride + scale_block_offset +
           (slot % page_block_size) * scale_token_stride + scale_offset;
  }
};

// Decodes token rows of one paged cache into fp32. Cheap to construct (no allocation); read()
// touches only the token's own bytes. Slots must be valid: 0 <= slot < num_slots.
class KvTokenReader {
 public:
  explicit KvTokenReader(const sparse_mla::detail::KvCacheParams& cache)
      : data_(cache.data),
        layout_(cache.format, cache.layout, cache.page_block_size, cache.block_stride_bytes,
                cache.d_qk) {}

  int d_qk() const { return layout_.d_qk; }
  const KvTokenLayout& layout() const { return layout_; }

  // row: [d_qk] fp32. Quantized dims are code value * scale in fp32 (e4m3 bytes, or e2m1
  // nibbles with value 2i in the low nibble of byte i); the tail is bf16 widened.
  void read(int64_t slot, float* row) const {
    const uint8_t* data = data_ + layout_.data_offset(slot);
    const uint8_t* scales = data_ + layout_.scale_byte_offset(slot);
    const bool fp4 = layout_.value_encoding == ValueEncoding::kE2m1;
    for (int tile = 0; tile < layout_.num_scales; ++tile) {
      float* out = row + tile * layout_.tile_size;
      const float s = scale(scales, tile);
      if (fp4) {
        const uint8_t* q = data + tile * layout_.tile_size / 2;
        for (int i = 0; i < layout_.tile_size / 2; ++i) {
          out[2 * i] = kE2m1ToFloat[q[i] & 0xf] * s;
          out[2 * i + 1] = kE2m1ToFloat[q[i] >> 4] * s;
        }
      } else {
        const uint8_t* q = data + tile * layout_.tile_size;
        for (int i = 0; i < layout_.tile_size; ++i) out[i] = kE4m3ToFloat[q[i]] * s;
      }
    }
    const uint8_t* tail = data + layout_.tail_offset;
    float* out = row + layout_.quantized_dims;
    for (int i = 0; i < layout_.tail_dims; ++i) {
      uint16_t bits;
      std::memcpy(&bits, tail + 2 * i, 2);  // rows need not be 2-byte aligned (odd v32 strides)
      out[i] = bf16_to_float_inline(bits);
    }
  }

 private:
  // Scale `tile` of a token whose scales start at p (fp32 possibly unaligned, ue8m0 or e4m3).
  float scale(const uint8_t* p, int tile) const {
    if (layout_.scale_encoding == ScaleEncoding::kFloat32) {
      float s;
      std::memcpy(&s, p + 4 * tile, 4);
      return s;
    }
    if (layout_.scale_encoding == ScaleEncoding::kE4m3) return kE4m3ToFloat[p[tile]];
    return ue8m0_to_float_inline(p[tile]);
  }

  const uint8_t* data_;
  KvTokenLayout layout_;
};

}  // namespace sparse_mla::cpu
