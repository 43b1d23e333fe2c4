// The thin layer between torch and the public C++ API: views of at::Tensor as TensorView and
// KvCacheView, run options for a tensor's device (back end + torch's current stream), and
// Status -> torch exception (kInvalidArgument -> ValueError, anything else -> RuntimeError,
// message unchanged). Nothing here copies or allocates tensor data.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <string_view>

#include "sparse_mla/backend.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::python {

// Throws c10::ValueError (Python ValueError) for kInvalidArgument and c10::Error (RuntimeError)
// for every other non-ok code; the exception text is status.message().
void throw_if_error(const Status& status);
// Throws ValueError (the Python exception) with `message`.
[[noreturn]] void fail_value(const std::string& message);

// Device of a tensor in the library's terms. Throws ValueError for devices other than CPU/CUDA.
Device to_device(const char* op, const char* name, const at::Tensor& t);

// A view of `t` (sizes, element strides, data pointer, device). `name` is the argument's name in
// error messages. Throws ValueError for ranks above 4 and dtypes the library never takes.
TensorView to_view(const char* op, const char* name, const at::Tensor& t);
std::optional<TensorView> to_view(const char* op, const char* name,
                                  const std::optional<at::Tensor>& t);

// A paged cache as FlashMLA passes it: `t` is [num_blocks, page_block_size, 1, bytes_per_token]
// of uint8 / int8 / float8_e4m3fn (or [.., 1, d_qk] bf16 for the bf16 format), token rows
// `bytes_per_token` apart (stride(1)), blocks stride(0) apart. `format` is a format name
// ("v32_fp8", "v4_fp8", "bf16"); when absent it is inferred from bytes_per_token
// (656 -> v32_fp8, 584 -> v4_fp8, 1024 / 1152 -> bf16, or a bf16 dtype).
KvCacheView to_cache_view(const char* op, const char* name, const at::Tensor& t,
                          std::optional<std::string_view> format);

// Bytes addressable from t.data_ptr() to the end of its storage.
int64_t bytes_to_storage_end(const at::Tensor& t);

// The back end for `device` (kCpu or kCuda) and, for CUDA, torch's current stream on it.
RunOptions run_options_for(const at::Device& device);

}  // namespace sparse_mla::python
