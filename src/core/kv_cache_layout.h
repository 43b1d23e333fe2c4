// The layout rules every KV-cache view must satisfy, whoever reads it (sparse_decode's validation,
// the host codec): a format of this build, the format's d_qk, at least `min_blocks` blocks, pages
// of at least one token, a block stride no smaller than the format's minimum and aligned as the
// format requires, and a total size within int64. Callers add their own rules on top (decode:
// non-empty, 16-B aligned, int32-addressable slots; codec: host memory).
#pragma once

#include <cstdint>
#include <string>

#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::detail {

// "" when `cache` satisfies the rules, else one message naming the field and its value, e.g.
// "kv_cache.d_qk = 576 does not match format v4_fp8 (needs 512)" for what = "kv_cache".
std::string kv_cache_layout_error(const KvCacheView& cache, const std::string& what,
                                  int64_t min_blocks);

}  // namespace sparse_mla::detail
