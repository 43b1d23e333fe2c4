// quantize_kv_cache and dequantize_kv_cache as torch operators over the host codec
// (kv_cache_codec.h). CPU tensors only; the Python layer stages CUDA tensors through host memory.
#include <ATen/ops/empty.h>

#include "ops.h"
#include "sparse_mla/kv_cache_codec.h"
#include "torch_adapter.h"

namespace sparse_mla::python {
namespace {

// `t` as bytes: [num_blocks, used] rows `row_stride` bytes apart from its first element.
at::Tensor block_bytes(const at::Tensor& t, int64_t num_blocks, int64_t used, int64_t row_stride) {
  const at::Tensor bytes = t.view(at::kByte);
  return bytes.as_strided({num_blocks, used}, {row_stride, 1}, bytes.storage_offset());
}

}  // namespace

void quantize_kv_cache(const at::Tensor& kv, std::string_view kv_format, at::Tensor& cache) {
  constexpr const char* kOp = "quantize_kv_cache";
  check_disjoint(kOp, "cache", cache, "kv", kv);
  at::Tensor staged;
  KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format, &staged);
  const TensorView rows = to_view(kOp, "kv", kv);
  // The codec writes whole block strides (padding included), also after the last block's
  // tokens. When the storage ends before that (a tensor holding just the blocks' bytes, as a
  // stride-preserving clone makes) or the blocks are packed (restaged by to_cache_view), the
  // codec writes a staging buffer and only the bytes of each block's tokens are copied back.
  const int64_t used = kv_cache_bytes_per_token(view.format, view.d_qk) * view.page_block_size;
  const int64_t needed = view.num_blocks * view.block_stride_bytes;
  // (torch guarantees the storage holds the tensor's own elements: every block's token bytes.)
  const int64_t available = bytes_to_storage_end(cache);
  const int64_t cache_stride = view.num_blocks > 1
                                   ? cache.stride(0) * static_cast<int64_t>(cache.element_size())
                                   : view.block_stride_bytes;
  if (!staged.defined() && available < needed) {
    staged = at::empty({needed}, cache.options().dtype(at::kByte));
    view.data = staged.data_ptr();
  }
  throw_if_error(sparse_mla::quantize_kv_cache(rows, view));
  if (staged.defined() && view.num_blocks > 0) {
    block_bytes(cache, view.num_blocks, used, cache_stride)
        .copy_(block_bytes(staged, view.num_blocks, used, view.block_stride_bytes));
  }
}

void dequantize_kv_cache(const at::Tensor& cache, std::optional<std::string_view> kv_format,
                         at::Tensor& out) {
  constexpr const char* kOp = "dequantize_kv_cache";
  check_no_internal_overlap(kOp, "out", out);
  check_disjoint(kOp, "out", out, "cache", cache);
  at::Tensor staged;
  const KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format, &staged);
  throw_if_error(sparse_mla::dequantize_kv_cache(view, to_view(kOp, "out", out)));
}

}  // namespace sparse_mla::python
