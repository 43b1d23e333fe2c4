// The KV-cache format traits table (SPEC §4) and the helpers derived from it.
// Every (format, page layout) pair is one row of kFormats; nothing else in this file names a
// format, so a new format or layout is a new enum value plus a new row.
#include "sparse_mla/kv_cache_format.h"

#include <array>
#include <limits>

namespace sparse_mla {
namespace {

using enum KvCacheFormat;
using enum KvLayout;
constexpr ValueEncoding kE4m3Values = ValueEncoding::kE4m3;
constexpr ValueEncoding kE2m1Values = ValueEncoding::kE2m1;

// Row fields: format, layout, name, d_qk, bytes_per_token, value_encoding, quantized_dims,
// quantized_bytes, tile_size, num_scales, scale_encoding, scale_bytes, data_row_bytes,
// scale_offset_in_row, scale_row_bytes, tail_offset, block_alignment. The first row of a format
// is its default layout. The bf16 row leaves d_qk-dependent sizes 0 (taken from the cache's
// d_qk); its unquantized tail is the whole row.
constexpr std::array<KvCacheFormatInfo, 7> kFormats = {{
    // v32_fp8: [0,512) e4m3 | [512,528) 4 x fp32 scale | [528,656) 64 x bf16 rope.
    {kV32Fp8, kTokenInterleaved, "v32_fp8", 576, 656, kE4m3Values, 512, 512, 128, 4,
     ScaleEncoding::kFloat32, 4, 656, 512, 0, 528, 1},
    // v4_fp8: per block, pbs rows of [448 x e4m3 | 64 x bf16 rope] (576 B), then pbs rows of
    // [7 x ue8m0 | 1 pad] (8 B); block stride a multiple of 576.
    {kV4Fp8, kPageSplit, "v4_fp8", 512, 584, kE4m3Values, 448, 448, 64, 7, ScaleEncoding::kUe8m0, 1,
     576, 0, 8, 448, 576},
    // bf16: d_qk x bf16 per token.
    {kBf16, kTokenInterleaved, "bf16", 0, 0, ValueEncoding::kNone, 0, 0, 0, 0, ScaleEncoding::kNone,
     0, 0, 0, 0, 0, 1},
    // v41_fp8 page_split: pbs rows of 512 x e4m3, then pbs rows of 16 x ue8m0; stride % 512 == 0.
    {kV41Fp8, kPageSplit, "v41_fp8", 512, 528, kE4m3Values, 512, 512, 32, 16, ScaleEncoding::kUe8m0,
     1, 512, 0, 16, 512, 512},
    // v41_fp8 token_interleaved: records [512 x e4m3 | 16 x ue8m0]; stride % 528 == 0.
    {kV41Fp8, kTokenInterleaved, "v41_fp8", 512, 528, kE4m3Values, 512, 512, 32, 16,
     ScaleEncoding::kUe8m0, 1, 528, 512, 0, 512, 528},
    // v41_fp4 page_split: pbs rows of 256 B (512 x e2m1), then pbs rows of 32 x e4m3 scales;
    // stride % 256 == 0.
    {kV41Fp4, kPageSplit, "v41_fp4", 512, 288, kE2m1Values, 512, 256, 16, 32, ScaleEncoding::kE4m3,
     1, 256, 0, 32, 256, 256},
    // v41_fp4 token_interleaved: records [256 B e2m1 | 32 x e4m3]; stride % 288 == 0.
    {kV41Fp4, kTokenInterleaved, "v41_fp4", 512, 288, kE2m1Values, 512, 256, 16, 32,
     ScaleEncoding::kE4m3, 1, 288, 256, 0, 256, 288},
}};

// Returned for a (format, layout) pair outside the table (a layout the format does not have, a
// cast from a bad integer): every size is 0, so callers that validate against it reject the
// cache instead of reading memory.
constexpr KvCacheFormatInfo kUnknownFormat = {static_cast<KvCacheFormat>(-1),
                                              kDefault,
                                              "unknown",
                                              0,
                                              0,
                                              ValueEncoding::kNone,
                                              0,
                                              0,
                                              0,
                                              0,
                                              ScaleEncoding::kNone,
                                              0,
                                              0,
                                              0,
                                              0,
                                              0,
                                              1};

constexpr std::array<std::string_view, 3> kLayoutNames = {"default", "page_split",
                                                          "token_interleaved"};

}  // namespace

const KvCacheFormatInfo& kv_cache_format_info(KvCacheFormat format, KvLayout layout) {
  for (const KvCacheFormatInfo& info : kFormats) {
    if (info.format == format && (layout == kDefault || info.layout == layout)) return info;
  }
  return kUnknownFormat;
}

std::optional<KvCacheFormat> parse_kv_cache_format(std::string_view name) {
  for (const KvCacheFormatInfo& info : kFormats) {
    if (info.name == name) return info.format;
  }
  return std::nullopt;
}

const char* kv_cache_format_name(KvCacheFormat format) {
  // Every name in the table is a string literal, so data() is NUL-terminated.
  return kv_cache_format_info(format).name.data();
}

std::optional<KvLayout> parse_kv_layout(std::string_view name) {
  for (size_t i = 0; i < kLayoutNames.size(); ++i) {
    if (kLayoutNames[i] == name) return static_cast<KvLayout>(i);
  }
  return std::nullopt;
}

const char* kv_layout_name(KvLayout layout) {
  const auto i = static_cast<size_t>(layout);
  return i < kLayoutNames.size() ? kLayoutNames[i].data() : "unknown";
}

KvLayout resolve_kv_layout(KvCacheFormat format, KvLayout layout) {
  return layout != kDefault ? layout : kv_cache_format_info(format).layout;
}

bool kv_cache_layout_supported(KvCacheFormat format, KvLayout layout) {
  return kv_cache_format_info(format, layout).format == format;
}

bool kv_cache_extra_format_allowed(KvCacheFormat main, KvCacheFormat extra) {
  if (main == kV41Fp8) return extra == kV41Fp8 || extra == kV41Fp4;
  return extra == main && kv_cache_format_info(main).format == main;
}

const char* kv_cache_extra_format_rule(KvCacheFormat main) {
  return main == kV41Fp8 ? "a v41_fp8 main cache takes a v41_fp8 or v41_fp4 extra cache"
                         : "the extra cache has the main cache's format";
}

int kv_cache_bytes_per_token(KvCacheFormat format, int d_qk) {
  const KvCacheFormatInfo& info = kv_cache_format_info(format);
  if (info.name == kUnknownFormat.name) return 0;
  return info.bytes_per_token != 0 ? info.bytes_per_token : 2 * d_qk;
}

int64_t kv_cache_min_block_stride(KvCacheFormat format, int64_t page_block_size, int d_qk,
                                  KvLayout layout) {
  const KvCacheFormatInfo& info = kv_cache_format_info(format, layout);
  const int64_t bytes = kv_cache_bytes_per_token(format, d_qk);
  if (info.format != format || bytes <= 0 || page_block_size <= 0) return 0;
  const int64_t align = info.block_alignment;
  // Saturate instead of overflowing: no real page block comes near this.
  if (page_block_size > (std::numeric_limits<int64_t>::max() - align) / bytes) {
    return std::numeric_limits<int64_t>::max();
  }
  const int64_t used = page_block_size * bytes;
  return (used + align - 1) / align * align;
}

}  // namespace sparse_mla
