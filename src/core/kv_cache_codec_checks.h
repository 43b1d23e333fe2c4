// The KV-cache codec's argument checks (kv_cache_codec.h). quantize_kv_cache, dequantize_kv_cache
// and write_kv_cache run exactly these before touching memory, whichever device the tensors are
// on; they are exposed so tests can check a call without running it
// (tests/cpp/validation_fuzz_test.cpp). None of them reads tensor data: write_kv_cache's
// per-slot range check runs in the host writer (the device writer skips out-of-range slots).
#pragma once

#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::detail {

Status check_quantize_args(const TensorView& kv_bf16, const KvCacheView& cache);
Status check_dequantize_args(const KvCacheView& cache, const TensorView& kv_out);
Status check_write_args(const TensorView& rows, const TensorView& slot_mapping,
                        const KvCacheView& cache);

}  // namespace sparse_mla::detail
