// The KV-cache format traits table (SPEC §4) and the helpers derived from it.
// Every format is one row of kFormats; nothing else in this file names a format, so a new format
// (DeepSeek V4.1's v41_fp8 / v41_fp4) is a new enum value plus a new row.
#include "sparse_mla/kv_cache_format.h"

#include <array>
#include <limits>

namespace sparse_mla {
namespace {

// Row fields: format, name, d_qk, bytes_per_token, quantized_dims, tile_size, num_scales,
// scale_encoding, page_layout, data_row_bytes, scale_offset_in_row, scale_row_bytes, rope_offset,
// block_alignment. The bf16 row leaves d_qk-dependent sizes 0 (taken from the cache's d_qk);
// its unquantized "rope" part is the whole row (rope_offset 0, d_qk values).
constexpr std::array<KvCacheFormatInfo, 3> kFormats = {{
    // v32_fp8: [0,512) e4m3 | [512,528) 4 x fp32 scale | [528,656) 64 x bf16 rope.
    {KvCacheFormat::kV32Fp8, "v32_fp8", 576, 656, 512, 128, 4, ScaleEncoding::kFloat32,
     PageLayout::kTokenRows, 656, 512, 0, 528, 1},
    // v4_fp8: per block, pbs rows of [448 x e4m3 | 64 x bf16 rope] (576 B), then pbs rows of
    // [7 x ue8m0 | 1 pad] (8 B); block stride a multiple of 576.
    {KvCacheFormat::kV4Fp8, "v4_fp8", 512, 584, 448, 64, 7, ScaleEncoding::kUe8m0,
     PageLayout::kBlockSplit576, 576, 0, 8, 448, 576},
    // bf16: d_qk x bf16 per token.
    {KvCacheFormat::kBf16, "bf16", 0, 0, 0, 0, 0, ScaleEncoding::kNone, PageLayout::kTokenRows, 0,
     0, 0, 0, 1},
}};

// Returned for a format value outside the table (a cast from a bad integer): every size is 0, so
// callers that validate against it reject the cache instead of reading memory.
constexpr KvCacheFormatInfo kUnknownFormat = {
    static_cast<KvCacheFormat>(-1), "unknown", 0, 0, 0, 0, 0, ScaleEncoding::kNone,
    PageLayout::kTokenRows,         0,         0, 0, 0, 1};

}  // namespace

const KvCacheFormatInfo& kv_cache_format_info(KvCacheFormat format) {
  for (const KvCacheFormatInfo& info : kFormats) {
    if (info.format == format) return info;
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

int kv_cache_bytes_per_token(KvCacheFormat format, int d_qk) {
  const KvCacheFormatInfo& info = kv_cache_format_info(format);
  if (info.name == kUnknownFormat.name) return 0;
  return info.bytes_per_token != 0 ? info.bytes_per_token : 2 * d_qk;
}

int64_t kv_cache_min_block_stride(KvCacheFormat format, int64_t page_block_size, int d_qk) {
  const int64_t bytes = kv_cache_bytes_per_token(format, d_qk);
  if (bytes <= 0 || page_block_size <= 0) return 0;
  const int64_t align = kv_cache_format_info(format).block_alignment;
  // Saturate instead of overflowing: no real page block comes near this.
  if (page_block_size > (std::numeric_limits<int64_t>::max() - align) / bytes) {
    return std::numeric_limits<int64_t>::max();
  }
  const int64_t used = page_block_size * bytes;
  return (used + align - 1) / align * align;
}

}  // namespace sparse_mla
