// quantize_kv_cache, dequantize_kv_cache and write_kv_cache as torch operators over the library's
// codec (kv_cache_codec.h): CPU tensors on the host codec, CUDA tensors as device kernels on
// torch's current stream (nothing is staged through host memory).
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

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

// The block stride of `cache` as torch reports it (a single block: the view's own).
int64_t tensor_block_stride(const at::Tensor& cache, const KvCacheView& view) {
  return view.num_blocks > 1 ? cache.stride(0) * static_cast<int64_t>(cache.element_size())
                             : view.block_stride_bytes;
}

// Copies the bytes of every block's tokens from the staging buffer `staged` (the format's block
// stride) back into `cache`.
void copy_back(const at::Tensor& cache, const at::Tensor& staged, const KvCacheView& view) {
  if (view.num_blocks == 0) return;
  const int64_t used = kv_cache_bytes_per_token(view.format, view.d_qk) * view.page_block_size;
  block_bytes(cache, view.num_blocks, used, tensor_block_stride(cache, view))
      .copy_(block_bytes(staged, view.num_blocks, used, view.block_stride_bytes));
}

}  // namespace

void quantize_kv_cache(const at::Tensor& kv, std::string_view kv_format, at::Tensor& cache,
                       std::optional<std::string_view> kv_layout) {
  constexpr const char* kOp = "quantize_kv_cache";
  check_disjoint(kOp, "cache", cache, "kv", kv);
  at::Tensor staged;
  KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format, kv_layout, &staged);
  const TensorView rows = to_view(kOp, "kv", kv);
  const c10::DeviceGuard guard(cache.device());
  // The codec writes whole block strides (padding included), also after the last block's
  // tokens. When the storage ends before that (a tensor holding just the blocks' bytes, as a
  // stride-preserving clone makes) or the blocks are packed (restaged by to_cache_view), the
  // codec writes a staging buffer and only the bytes of each block's tokens are copied back.
  const int64_t needed = view.num_blocks * view.block_stride_bytes;
  // (torch guarantees the storage holds the tensor's own elements: every block's token bytes.)
  if (!staged.defined() && bytes_to_storage_end(cache) < needed) {
    staged = at::empty({needed}, cache.options().dtype(at::kByte));
    view.data = staged.data_ptr();
  }
  throw_if_error(sparse_mla::quantize_kv_cache(rows, view, run_options_for(cache.device())));
  if (staged.defined()) copy_back(cache, staged, view);
}

void dequantize_kv_cache(const at::Tensor& cache, std::optional<std::string_view> kv_format,
                         at::Tensor& out, std::optional<std::string_view> kv_layout) {
  constexpr const char* kOp = "dequantize_kv_cache";
  check_no_internal_overlap(kOp, "out", out);
  check_disjoint(kOp, "out", out, "cache", cache);
  at::Tensor staged;
  const KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format, kv_layout, &staged);
  const TensorView out_view = to_view(kOp, "out", out);
  const c10::DeviceGuard guard(cache.device());
  throw_if_error(sparse_mla::dequantize_kv_cache(view, out_view, run_options_for(cache.device())));
}

void write_kv_cache(const at::Tensor& rows, const at::Tensor& slot_mapping, at::Tensor& cache,
                    std::optional<std::string_view> kv_format,
                    std::optional<std::string_view> kv_layout) {
  constexpr const char* kOp = "write_kv_cache";
  check_disjoint(kOp, "cache", cache, "rows", rows);
  check_disjoint(kOp, "cache", cache, "slot_mapping", slot_mapping);
  // A packed page_split copy (a clone) is written through a staging buffer in the format's block
  // stride; a cache in its format's stride is written in place, with no allocation.
  at::Tensor staged;
  const KvCacheView view = to_cache_view(kOp, "cache", cache, kv_format, kv_layout, &staged);
  const TensorView rows_view = to_view(kOp, "rows", rows);
  const TensorView slots_view = to_view(kOp, "slot_mapping", slot_mapping);
  const c10::DeviceGuard guard(cache.device());
  throw_if_error(
      sparse_mla::write_kv_cache(rows_view, slots_view, view, run_options_for(cache.device())));
  if (staged.defined()) copy_back(cache, staged, view);
}

}  // namespace sparse_mla::python
