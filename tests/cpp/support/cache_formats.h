// Every KV-cache format with each d_qk it serves and each page layout it has: the set that
// format-sweeping tests cover. The two FP8 formats of V3.2 and V4 come first (some tests take
// only those).
#pragma once

#include <string>

#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::test_support {

struct CacheFormatCase {
  KvCacheFormat format;
  int d_qk;
  KvLayout layout = KvLayout::kDefault;  // resolved: the row of the traits table it tests

  // "v41_fp4_token_interleaved", "v32_fp8_576": a test-name suffix.
  std::string name() const {
    std::string n = kv_cache_format_name(format);
    if (format == KvCacheFormat::kBf16) n += "_" + std::to_string(d_qk);
    if (format == KvCacheFormat::kV41Fp8 || format == KvCacheFormat::kV41Fp4) {
      n += std::string("_") + kv_layout_name(layout);
    }
    return n;
  }
};

inline constexpr CacheFormatCase kAllCacheFormats[] = {
    {KvCacheFormat::kV32Fp8, 576, KvLayout::kTokenInterleaved},
    {KvCacheFormat::kV4Fp8, 512, KvLayout::kPageSplit},
    {KvCacheFormat::kBf16, 576, KvLayout::kTokenInterleaved},
    {KvCacheFormat::kBf16, 512, KvLayout::kTokenInterleaved},
    {KvCacheFormat::kV41Fp8, 512, KvLayout::kPageSplit},
    {KvCacheFormat::kV41Fp8, 512, KvLayout::kTokenInterleaved},
    {KvCacheFormat::kV41Fp4, 512, KvLayout::kPageSplit},
    {KvCacheFormat::kV41Fp4, 512, KvLayout::kTokenInterleaved},
};

}  // namespace sparse_mla::test_support
