// quantize_kv_cache and dequantize_kv_cache as torch operators over the host codec
// (kv_cache_codec.h). CPU tensors only; the Python layer stages CUDA tensors through host memory.
#include "ops.h"
#include "sparse_mla/kv_cache_codec.h"
#include "torch_adapter.h"

namespace sparse_mla::python {

void quantize_kv_cache(const at::Tensor& kv, std::string_view kv_format, at::Tensor& cache) {
  constexpr const char* kOp = "quantize_kv_cache";
  const KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format);
  // The codec writes whole block strides (padding included), also after the last block's
  // tokens: the storage must hold them.
  const int64_t needed = view.num_blocks * view.block_stride_bytes;
  const int64_t available = bytes_to_storage_end(cache);
  if (available < needed) {
    fail_value(std::string(kOp) + ": cache's storage holds " + std::to_string(available) +
               " bytes from its first element, but " + std::to_string(view.num_blocks) +
               " blocks of " + std::to_string(view.block_stride_bytes) + " bytes need " +
               std::to_string(needed));
  }
  throw_if_error(sparse_mla::quantize_kv_cache(to_view(kOp, "kv", kv), view));
}

void dequantize_kv_cache(const at::Tensor& cache, std::optional<std::string_view> kv_format,
                         at::Tensor& out) {
  constexpr const char* kOp = "dequantize_kv_cache";
  const KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format);
  throw_if_error(sparse_mla::dequantize_kv_cache(view, to_view(kOp, "out", out)));
}

}  // namespace sparse_mla::python
