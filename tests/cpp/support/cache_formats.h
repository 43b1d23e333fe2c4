// Every KV-cache format with each d_qk it serves: the set that format-sweeping tests cover.
// The two FP8 formats come first (some tests take only those).
#pragma once

#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::test_support {

struct CacheFormatCase {
  KvCacheFormat format;
  int d_qk;
};

inline constexpr CacheFormatCase kAllCacheFormats[] = {{KvCacheFormat::kV32Fp8, 576},
                                                       {KvCacheFormat::kV4Fp8, 512},
                                                       {KvCacheFormat::kBf16, 576},
                                                       {KvCacheFormat::kBf16, 512}};

}  // namespace sparse_mla::test_support
