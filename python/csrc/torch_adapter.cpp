// at::Tensor -> TensorView / KvCacheView, device -> RunOptions, Status -> torch exception.
// See torch_adapter.h. The library validates shapes, dtypes and strides itself; this file only
// rejects what a view cannot express (rank > 4, dtypes the library has no name for, devices
// other than CPU and CUDA) and works out a cache's format and block stride.
#include "torch_adapter.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <utility>

#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::python {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

std::optional<DType> to_dtype(at::ScalarType type) {
  switch (type) {
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kFloat:
      return DType::kFloat32;
    case at::kInt:
      return DType::kInt32;
    case at::kByte:
      return DType::kUInt8;
    case at::kFloat8_e4m3fn:
      return DType::kFloat8E4M3;
    default:
      return std::nullopt;
  }
}

}  // namespace

[[noreturn]] void fail_value(const std::string& message) { C10_THROW_ERROR(ValueError, message); }

void throw_if_error(const Status& status) {
  if (status.ok()) return;
  if (status.code() == StatusCode::kInvalidArgument) fail_value(status.message());
  C10_THROW_ERROR(Error, status.message());
}

Device to_device(const char* op, const char* name, const at::Tensor& t) {
  if (t.device().is_cpu()) return Device::cpu();
  if (t.device().is_cuda()) return Device::cuda(t.device().index());
  fail_value(std::string(op) + ": " + name + " is on device " + t.device().str() +
             "; sparse-mla runs on cpu and cuda tensors");
}

TensorView to_view(const char* op, const char* name, const at::Tensor& t) {
  // The prefix is built only on the error paths: this runs for every argument of every call.
  auto prefix = [&] { return std::string(op) + ": " + name; };
  if (!t.defined()) fail_value(prefix() + " is an undefined tensor");
  if (t.dim() > kMaxRank) {
    fail_value(prefix() + " must have rank <= " + std::to_string(kMaxRank) + ", got shape " +
               shape_text(t));
  }
  std::optional<DType> dtype = to_dtype(t.scalar_type());
  if (!dtype) {
    fail_value(prefix() + " has dtype " + std::string(c10::toString(t.scalar_type())) +
               ", which no argument of sparse-mla takes (bf16, fp32, int32, uint8, float8_e4m3fn)");
  }
  TensorView v;
  v.data = t.data_ptr();
  v.dtype = *dtype;
  v.rank = static_cast<int>(t.dim());
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  v.device = to_device(op, name, t);
  return v;
}

namespace {

std::string strides_text(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.stride(d));
  return s + "]";
}

// [first, last] byte addresses `t` touches; false when it has no elements.
bool byte_range(const at::Tensor& t, uintptr_t* first, uintptr_t* last) {
  if (t.numel() == 0) return false;
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(t.data_ptr());
  const auto elem = static_cast<int64_t>(t.element_size());
  *first = base + static_cast<uintptr_t>(lo * elem);
  *last = base + static_cast<uintptr_t>(hi * elem + elem - 1);
  return true;
}

}  // namespace

void check_no_internal_overlap(const char* op, const char* name, const at::Tensor& t) {
  if (t.numel() <= 1) return;
  // Dimensions of size > 1 by increasing stride: no two elements share memory if every stride
  // exceeds the span of the smaller-stride dimensions (sufficient, and what every layout torch
  // makes satisfies).
  std::array<std::pair<int64_t, int64_t>, 8> dims{};  // (|stride|, size)
  int n = 0;
  for (int64_t d = 0; d < t.dim() && n < 8; ++d) {
    if (t.size(d) > 1) dims[n++] = {std::abs(t.stride(d)), t.size(d)};
  }
  std::sort(dims.begin(), dims.begin() + n);
  int64_t span = 0;  // elements covered by the dimensions so far, minus one
  for (int i = 0; i < n; ++i) {
    if (dims[i].first <= span) {
      fail_value(std::string(op) + ": " + name + " has sizes " + shape_text(t) + " and strides " +
                 strides_text(t) +
                 ", so two of its elements share memory; an output needs strides under which "
                 "every element has its own memory (e.g. a contiguous tensor)");
    }
    span += (dims[i].second - 1) * dims[i].first;
  }
}

void check_disjoint(const char* op, const char* out_name, const at::Tensor& out,
                    const char* other_name, const at::Tensor& other) {
  if (!other.defined() || !out.defined() || !out.has_storage() || !other.has_storage()) return;
  if (!out.storage().is_alias_of(other.storage())) return;
  uintptr_t a0, a1, b0, b1;
  if (!byte_range(out, &a0, &a1) || !byte_range(other, &b0, &b1)) return;
  if (a0 <= b1 && b0 <= a1) {
    fail_value(std::string(op) + ": " + out_name + " overlaps " + other_name + " in memory (" +
               out_name + " spans bytes [" + std::to_string(static_cast<int64_t>(a0 - b0)) + ", " +
               std::to_string(static_cast<int64_t>(a1 - b0) + 1) + ") relative to " + other_name +
               "'s first byte, which spans " + std::to_string(b1 - b0 + 1) +
               "); outputs must not alias inputs or each other");
  }
}

std::optional<TensorView> to_view(const char* op, const char* name,
                                  const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return std::nullopt;
  return to_view(op, name, *t);
}

std::optional<KvLayout> parse_layout_arg(const char* op, const char* arg,
                                         std::optional<std::string_view> name) {
  if (!name.has_value()) return std::nullopt;
  std::optional<KvLayout> parsed = parse_kv_layout(*name);
  if (!parsed) {
    fail_value(std::string(op) + ": " + arg + " = \"" + std::string(*name) +
               "\" is not a KV-cache layout (page_split, token_interleaved)");
  }
  return parsed;
}

namespace {

// Formats a cache's bytes per token identify (bf16 aside: 2 * d_qk bytes).
constexpr std::array<KvCacheFormat, 4> kQuantizedFormats = {
    KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8, KvCacheFormat::kV41Fp8, KvCacheFormat::kV41Fp4};

bool has_both_layouts(KvCacheFormat f) {
  return kv_cache_layout_supported(f, KvLayout::kPageSplit) &&
         kv_cache_layout_supported(f, KvLayout::kTokenInterleaved);
}

}  // namespace

KvCacheFormat cache_format(const char* op, const char* name, const at::Tensor& t,
                           std::optional<std::string_view> format, CacheArgNames arg_names) {
  const std::string prefix = std::string(op) + ": " + name;
  if (!t.defined()) fail_value(prefix + " is an undefined tensor");
  if (t.dim() != 4 || t.size(2) != 1) {
    fail_value(prefix + " must have shape [num_blocks, page_block_size, 1, bytes_per_token], got " +
               shape_text(t));
  }
  const at::ScalarType type = t.scalar_type();
  const bool bf16_rows = type == at::kBFloat16;
  if (!bf16_rows && type != at::kByte && type != at::kChar && type != at::kFloat8_e4m3fn) {
    fail_value(prefix + " has dtype " + std::string(c10::toString(type)) +
               "; a cache is uint8, int8 or float8_e4m3fn bytes (or bf16 rows)");
  }
  const int64_t row_bytes = bf16_rows ? 2 * t.size(3) : t.size(3);
  if (format.has_value()) {
    std::optional<KvCacheFormat> parsed = parse_kv_cache_format(*format);
    if (!parsed) {
      fail_value(std::string(op) + ": " + arg_names.format + " = \"" + std::string(*format) +
                 "\" is not a KV-cache format (v32_fp8, v4_fp8, bf16, v41_fp8, v41_fp4)");
    }
    return *parsed;
  }
  if (bf16_rows) return KvCacheFormat::kBf16;
  for (KvCacheFormat f : kQuantizedFormats) {
    if (kv_cache_bytes_per_token(f, 0) == row_bytes) return f;
  }
  if (row_bytes == 1024 || row_bytes == 1152) return KvCacheFormat::kBf16;
  fail_value(prefix + ".shape[3] (bytes_per_token) = " + std::to_string(row_bytes) +
             " matches no KV-cache format (656 v32_fp8, 584 v4_fp8, 528 v41_fp8, 288 v41_fp4, "
             "1024 or 1152 bf16)");
}

KvCacheView to_cache_view(const char* op, const char* name, const at::Tensor& t,
                          std::optional<std::string_view> format,
                          std::optional<std::string_view> layout, at::Tensor* staged,
                          CacheArgNames arg_names) {
  const std::string prefix = std::string(op) + ": " + name;
  const KvCacheFormat fmt = cache_format(op, name, t, format, arg_names);
  const bool bf16_rows = t.scalar_type() == at::kBFloat16;
  const int64_t last = t.size(3);
  const int64_t row_bytes = bf16_rows ? 2 * last : last;
  const KvLayout kv_layout =
      parse_layout_arg(op, arg_names.layout, layout).value_or(KvLayout::kDefault);
  if (!kv_cache_layout_supported(fmt, kv_layout)) {
    fail_value(std::string(op) + ": " + arg_names.layout + " = \"" + std::string(*layout) +
               "\" is not a layout of " + kv_cache_format_name(fmt) + " (its layout is " +
               kv_layout_name(resolve_kv_layout(fmt, KvLayout::kDefault)) + ")");
  }
  const KvCacheFormatInfo& info = kv_cache_format_info(fmt, kv_layout);
  if (bf16_rows && fmt != KvCacheFormat::kBf16) {
    fail_value(prefix + " holds bf16 values, which only the bf16 format stores (" +
               arg_names.format + " = " + std::string(info.name) + ")");
  }
  const int d_qk = info.d_qk != 0 ? info.d_qk : static_cast<int>(row_bytes / 2);
  const int64_t bytes_per_token = kv_cache_bytes_per_token(fmt, d_qk);
  if (row_bytes != bytes_per_token) {
    fail_value(prefix + ".shape[3] = " + std::to_string(last) + " gives " +
               std::to_string(row_bytes) + " bytes per token, but " + std::string(info.name) +
               " stores " + std::to_string(bytes_per_token));
  }
  const int64_t elem = static_cast<int64_t>(t.element_size());
  if (last > 1 && t.stride(3) != 1) {
    fail_value(prefix + ".stride(3) = " + std::to_string(t.stride(3)) +
               " must be 1 (token bytes contiguous)");
  }
  const int64_t num_blocks = t.size(0), page_block_size = t.size(1);
  if (page_block_size > 1 && t.stride(1) * elem != bytes_per_token) {
    fail_value(prefix + ".stride(1) = " + std::to_string(t.stride(1)) +
               " must equal bytes_per_token (" + std::to_string(bytes_per_token / elem) +
               " elements): token rows are packed inside a block");
  }
  KvCacheView v;
  v.data = t.data_ptr();
  v.format = fmt;
  v.layout = info.layout;
  v.num_blocks = num_blocks;
  v.page_block_size = page_block_size;
  v.d_qk = d_qk;
  v.device = to_device(op, name, t);
  v.block_stride_bytes = t.stride(0) * elem;
  const int64_t min_stride = kv_cache_min_block_stride(fmt, page_block_size, d_qk, info.layout);
  const bool page_split = info.layout == KvLayout::kPageSplit;
  if (page_split && v.block_stride_bytes > min_stride) {
    const std::string layout_text = has_both_layouts(fmt) ? "page_split " : "";
    fail_value(
        prefix + ".stride(0) = " + std::to_string(t.stride(0)) + " (" +
        std::to_string(v.block_stride_bytes) + " bytes) is not the " + std::string(info.name) +
        " " + layout_text + "block stride " + std::to_string(min_stride) + " for page_block_size " +
        std::to_string(page_block_size) + ": a " + std::string(info.name) + " " + layout_text +
        "block stores the scales after all the rows it holds, so a view keeping "
        "fewer rows than its blocks hold (e.g. cache[:, :k]) or a padded block stride "
        "cannot be read; pass whole, unpadded pages");
  }
  if (num_blocks == 1) {
    // The stride of a single block is never used to address anything; torch reports the packed
    // size, which for page_split formats can be below the aligned stride the format prescribes.
    if (v.block_stride_bytes < min_stride) v.block_stride_bytes = min_stride;
  } else if (staged != nullptr && page_split &&
             v.block_stride_bytes == bytes_per_token * page_block_size &&
             v.block_stride_bytes < min_stride) {
    // Packed blocks (a clone of a cache view): every block's bytes, closer together than the
    // format's stride. Copy them into a buffer with the format's block stride.
    const int64_t used = v.block_stride_bytes;
    *staged = at::empty({num_blocks * min_stride}, t.options().dtype(at::kByte));
    staged->as_strided({num_blocks, used}, {min_stride, 1})
        .copy_(t.view(at::kByte).reshape({num_blocks, used}));
    v.data = staged->data_ptr();
    v.block_stride_bytes = min_stride;
  }
  return v;
}

int64_t bytes_to_storage_end(const at::Tensor& t) {
  return static_cast<int64_t>(t.storage().nbytes()) -
         t.storage_offset() * static_cast<int64_t>(t.element_size());
}

RunOptions run_options_for(const at::Device& device) {
  RunOptions options;
  if (device.is_cuda()) {
    options.backend = Backend::kCuda;
    // torch's current stream on that device, through c10's device-generic interface (no CUDA
    // headers needed); native_handle() is the cudaStream_t.
    const c10::impl::DeviceGuardImplInterface* impl =
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    options.stream = impl->getStream(device).native_handle();
  } else {
    options.backend = Backend::kCpu;
  }
  return options;
}

}  // namespace sparse_mla::python
