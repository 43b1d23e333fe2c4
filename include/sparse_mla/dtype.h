// Element types of the public API, with their sizes and names.
#pragma once

#include <cstddef>

namespace sparse_mla {

enum class DType {
  kBFloat16,    // bf16: q, kv, out
  kFloat32,     // fp32: lse, max_logits, attn_sink
  kInt32,       // indices, topk_length
  kUInt8,       // raw KV-cache bytes
  kFloat8E4M3,  // float8 e4m3fn, accepted for KV-cache bytes (FlashMLA passes the cache so)
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kUInt8:
    case DType::kFloat8E4M3:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t);

}  // namespace sparse_mla
