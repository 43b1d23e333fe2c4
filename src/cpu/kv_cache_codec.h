// The host KV-cache codec (kv_cache_codec.h's rules on the CPU): called by the public entry points
// (src/core/kv_cache_codec.cpp) after core/kv_cache_codec_checks.h accepted the arguments and
// found them in host memory. `num_threads` is RunOptions::num_threads (0 = every hardware thread).
#pragma once

#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::cpu {

Status quantize_kv_cache_host(const TensorView& kv_bf16, const KvCacheView& cache,
                              int num_threads);
Status dequantize_kv_cache_host(const KvCacheView& cache, const TensorView& kv_out,
                                int num_threads);
// Checks every slot first (slot >= num_slots: an error naming slot_mapping[i] and its value,
// nothing written), then writes. A slot mapped by several rows gets the last of them.
Status write_kv_cache_host(const TensorView& rows, const TensorView& slot_mapping,
                           const KvCacheView& cache, int num_threads);

}  // namespace sparse_mla::cpu
