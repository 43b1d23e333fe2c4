// The work of one call, counted exactly as docs/flashmla_baseline.md ("How to count") says, so that
// every number the CLI prints compares with the FlashMLA anchors. FLOPs are nominal: invalid slots
// inside topk (or topk_length) count as work.
#pragma once

#include <cstdint>

#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::cli {

struct WorkCount {
  double flop = 0;
  double bytes = 0;
};

// Prefill:
//   attended = s_q * topk (or sum(topk_length))
//   flop     = 2 * attended * h_q * (d_qk + d_v)
//   bytes    = valid_slots * d_qk * 2 + s_q * h_q * (d_qk + d_v) * 2
inline WorkCount prefill_work(int64_t s_q, int64_t h_q, int64_t d_qk, int64_t d_v, int64_t attended,
                              int64_t valid_slots) {
  WorkCount w;
  w.flop = 2.0 * static_cast<double>(attended) * static_cast<double>(h_q) *
           static_cast<double>(d_qk + d_v);
  w.bytes =
      static_cast<double>(valid_slots) * static_cast<double>(d_qk) * 2.0 +
      static_cast<double>(s_q) * static_cast<double>(h_q) * static_cast<double>(d_qk + d_v) * 2.0;
  return w;
}

// Bytes of one retrieved cache token: 656 (v32_fp8), 576 (v4_fp8: scales not counted),
// 2 * d_qk (bf16), and the whole record for DeepSeek V4.1's 528 (v41_fp8) and 288 (v41_fp4),
// whose scales are part of every value (FlashMLA's counting has no V4.1 rule).
inline int64_t decode_token_bytes(KvCacheFormat format, int64_t d_qk) {
  switch (format) {
    case KvCacheFormat::kV32Fp8:
      return 656;
    case KvCacheFormat::kV4Fp8:
      return 576;
    case KvCacheFormat::kBf16:
      return 2 * d_qk;
    case KvCacheFormat::kV41Fp8:
      return 528;
    case KvCacheFormat::kV41Fp4:
      return 288;
  }
  return 0;
}

// Decode (main + extra cache, each counted with its own format):
//   attended  = b * s_q * topk (or s_q * sum(topk_length)), plus the same for extra
//   retrieved = distinct valid physical slots read, per cache
//   flop      = 2 * h_q * attended * (d_qk + d_v)
//   bytes     = 2*b*s_q*h_q*d_qk + retrieved_main * token_bytes(main) +
//               retrieved_extra * token_bytes(extra) + 2*b*s_q*h_q*d_v
inline WorkCount decode_work(int64_t b, int64_t s_q, int64_t h_q, int64_t d_qk, int64_t d_v,
                             int64_t attended, KvCacheFormat format, int64_t retrieved_main,
                             KvCacheFormat extra_format, int64_t retrieved_extra) {
  const double queries = static_cast<double>(b) * static_cast<double>(s_q);
  WorkCount w;
  w.flop = 2.0 * static_cast<double>(h_q) * static_cast<double>(attended) *
           static_cast<double>(d_qk + d_v);
  w.bytes =
      2.0 * queries * static_cast<double>(h_q) * static_cast<double>(d_qk) +
      static_cast<double>(retrieved_main) * static_cast<double>(decode_token_bytes(format, d_qk)) +
      static_cast<double>(retrieved_extra) *
          static_cast<double>(decode_token_bytes(extra_format, d_qk)) +
      2.0 * queries * static_cast<double>(h_q) * static_cast<double>(d_v);
  return w;
}

// The cache writer (write_kv_cache of n rows): reads n bf16 rows and n int32 slots, writes n
// records of the format.
inline WorkCount write_kv_cache_work(int64_t n, int64_t d_qk, KvCacheFormat format) {
  WorkCount w;
  w.bytes = static_cast<double>(n) *
            (2.0 * static_cast<double>(d_qk) + 4.0 +
             static_cast<double>(kv_cache_bytes_per_token(format, static_cast<int>(d_qk))));
  return w;
}

}  // namespace sparse_mla::cli
