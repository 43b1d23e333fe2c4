// The host KV-cache codec's argument checks (kv_cache_codec.cpp). quantize_kv_cache and
// dequantize_kv_cache run exactly these before touching memory; they are exposed so tests can
// check a call without running it (tests/cpp/validation_fuzz_test.cpp).
#pragma once

#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::cpu {

Status check_quantize_args(const TensorView& kv_bf16, const KvCacheView& cache);
Status check_dequantize_args(const KvCacheView& cache, const TensorView& kv_out);

}  // namespace sparse_mla::cpu
