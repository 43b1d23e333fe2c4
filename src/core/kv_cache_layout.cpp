#include "core/kv_cache_layout.h"

#include <cstdint>
#include <limits>

namespace sparse_mla::detail {

std::string kv_cache_layout_error(const KvCacheView& cache, const std::string& what,
                                  int64_t min_blocks) {
  auto str = [](int64_t v) { return std::to_string(v); };
  const std::string w = what + ".";
  if (kv_cache_format_info(cache.format).format != cache.format) {  // the "unknown" row
    return w + "format = " + str(static_cast<int>(cache.format)) +
           " is not a KV-cache format of this build";
  }
  if (!kv_cache_layout_supported(cache.format, cache.layout)) {
    const int layout = static_cast<int>(cache.layout);
    const bool named = layout >= 0 && layout <= static_cast<int>(KvLayout::kTokenInterleaved);
    return w + "layout = " + (named ? std::string(kv_layout_name(cache.layout)) : str(layout)) +
           " is not a layout of format " + kv_cache_format_name(cache.format) + " (it is " +
           kv_layout_name(resolve_kv_layout(cache.format, KvLayout::kDefault)) + ")";
  }
  const KvCacheFormatInfo& info = kv_cache_format_info(cache.format, cache.layout);
  const bool d_qk_ok =
      info.d_qk != 0 ? cache.d_qk == info.d_qk : (cache.d_qk == 512 || cache.d_qk == 576);
  if (!d_qk_ok) {
    return w + "d_qk = " + str(cache.d_qk) + " does not match format " + std::string(info.name) +
           " (needs " + (info.d_qk != 0 ? str(info.d_qk) : std::string("512 or 576")) + ")";
  }
  if (cache.num_blocks < min_blocks) {
    return w + "num_blocks = " + str(cache.num_blocks) + " must be >= " + str(min_blocks);
  }
  if (cache.page_block_size < 1) {
    return w + "page_block_size = " + str(cache.page_block_size) + " must be >= 1";
  }
  const int64_t min_stride =
      kv_cache_min_block_stride(cache.format, cache.page_block_size, cache.d_qk, cache.layout);
  if (cache.block_stride_bytes < min_stride) {
    return w + "block_stride_bytes = " + str(cache.block_stride_bytes) +
           " is smaller than the minimum " + str(min_stride) + " for " + std::string(info.name) +
           " with page_block_size " + str(cache.page_block_size);
  }
  if (cache.block_stride_bytes % info.block_alignment != 0) {
    return w + "block_stride_bytes = " + str(cache.block_stride_bytes) + " is not a multiple of " +
           str(info.block_alignment) + " as " + std::string(info.name) + " " +
           kv_layout_name(info.layout) + " requires";
  }
  if (cache.num_blocks > 0 &&
      cache.block_stride_bytes > std::numeric_limits<int64_t>::max() / cache.num_blocks) {
    return w + "num_blocks * block_stride_bytes = " + str(cache.num_blocks) + " * " +
           str(cache.block_stride_bytes) + " overflows int64";
  }
  return {};
}

}  // namespace sparse_mla::detail
