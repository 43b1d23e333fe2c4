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

// Rejects an output tensor two of whose elements share memory (strides that make dimensions
// overlap, not only the zero strides the library itself rejects). ValueError naming `name`.
void check_no_internal_overlap(const char* op, const char* name, const at::Tensor& t);

// Rejects `out` (an output or the workspace) sharing any byte with `other` (an input or another
// output): the library reads and writes through raw pointers, so aliasing gives garbage.
// `other` may be undefined (absent optional argument).
void check_disjoint(const char* op, const char* out_name, const at::Tensor& out,
                    const char* other_name, const at::Tensor& other);

// How a call names a cache's format and layout arguments in its errors: "kv_format" /
// "kv_layout" for the main cache, "extra_kv_format" / "extra_kv_layout" for the extra one.
struct CacheArgNames {
  const char* format = "kv_format";
  const char* layout = "kv_layout";
};

// A paged cache as FlashMLA passes it: `t` is [num_blocks, page_block_size, 1, bytes_per_token]
// of uint8 / int8 / float8_e4m3fn (or [.., 1, d_qk] bf16 for the bf16 format), token rows
// `bytes_per_token` apart (stride(1)), blocks stride(0) apart. `format` is a format name
// ("v32_fp8", "v4_fp8", "bf16", "v41_fp8", "v41_fp4"); when absent it is inferred from
// bytes_per_token (656 -> v32_fp8, 584 -> v4_fp8, 528 -> v41_fp8, 288 -> v41_fp4, 1024 / 1152 ->
// bf16, or a bf16 dtype). `layout` is "page_split" or "token_interleaved" (bytes cannot tell
// them apart); when absent, the format's own (page_split for v4_fp8 and the V4.1 records).
//
// A page_split block keeps its scales after all its data rows, so its block stride must be
// exactly kv_cache_min_block_stride (SPEC §4): a larger stride is what a view keeping fewer rows
// than its blocks hold looks like (cache[:, :k]), whose scales would be read at the wrong
// offsets, and is rejected. A *packed* multi-block page_split tensor (block stride
// page_block_size * bytes_per_token, what torch.clone() makes of a cache view) holds every byte
// of its blocks; with `staged` given it is copied into a buffer of the format's block stride
// (*staged, kept alive by the caller) and the view points there (the caller detects this by
// *staged being defined); without, it is rejected.
KvCacheView to_cache_view(const char* op, const char* name, const at::Tensor& t,
                          std::optional<std::string_view> format,
                          std::optional<std::string_view> layout, at::Tensor* staged = nullptr,
                          CacheArgNames args = {});

// The format a cache tensor is read as: `format` when given (ValueError naming arg_names.format
// for an unknown name), else inferred from its dtype and bytes per token as to_cache_view does.
// Checks the cache's rank and dtype.
KvCacheFormat cache_format(const char* op, const char* name, const at::Tensor& t,
                           std::optional<std::string_view> format, CacheArgNames arg_names = {});

// The layout named `name` (nullopt when absent). ValueError naming `arg` for an unknown name.
std::optional<KvLayout> parse_layout_arg(const char* op, const char* arg,
                                         std::optional<std::string_view> name);

// Bytes addressable from t.data_ptr() to the end of its storage.
int64_t bytes_to_storage_end(const at::Tensor& t);

// The back end for `device` (kCpu or kCuda) and, for CUDA, torch's current stream on it.
RunOptions run_options_for(const at::Device& device);

}  // namespace sparse_mla::python
