// at::Tensor -> TensorView / KvCacheView, device -> RunOptions, Status -> torch exception.
// See torch_adapter.h. The library validates shapes, dtypes and strides itself; this file only
// rejects what a view cannot express (rank > 4, dtypes the library has no name for, devices
// other than CPU and CUDA) and works out a cache's format and block stride.
#include "torch_adapter.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <string>

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
  const std::string prefix = std::string(op) + ": " + name;
  if (!t.defined()) fail_value(prefix + " is an undefined tensor");
  if (t.dim() > kMaxRank) {
    fail_value(prefix + " must have rank <= " + std::to_string(kMaxRank) + ", got shape " +
               shape_text(t));
  }
  std::optional<DType> dtype = to_dtype(t.scalar_type());
  if (!dtype) {
    fail_value(prefix + " has dtype " + std::string(c10::toString(t.scalar_type())) +
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

std::optional<TensorView> to_view(const char* op, const char* name,
                                  const std::optional<at::Tensor>& t) {
  if (!t.has_value()) return std::nullopt;
  return to_view(op, name, *t);
}

KvCacheView to_cache_view(const char* op, const char* name, const at::Tensor& t,
                          std::optional<std::string_view> format) {
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
  const int64_t last = t.size(3);
  const int64_t row_bytes = bf16_rows ? 2 * last : last;

  KvCacheFormat fmt;
  if (format.has_value()) {
    std::optional<KvCacheFormat> parsed = parse_kv_cache_format(*format);
    if (!parsed) {
      fail_value(std::string(op) + ": kv_format = \"" + std::string(*format) +
                 "\" is not a KV-cache format (v32_fp8, v4_fp8, bf16)");
    }
    fmt = *parsed;
  } else if (bf16_rows) {
    fmt = KvCacheFormat::kBf16;
  } else {
    bool found = false;
    for (KvCacheFormat f : {KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8}) {
      if (kv_cache_bytes_per_token(f, 0) == row_bytes) {
        fmt = f;
        found = true;
      }
    }
    if (!found && (row_bytes == 1024 || row_bytes == 1152)) {
      fmt = KvCacheFormat::kBf16;
      found = true;
    }
    if (!found) {
      fail_value(prefix + ".shape[3] (bytes_per_token) = " + std::to_string(row_bytes) +
                 " matches no KV-cache format (656 v32_fp8, 584 v4_fp8, 1024 or 1152 bf16)");
    }
  }
  const KvCacheFormatInfo& info = kv_cache_format_info(fmt);
  if (bf16_rows && fmt != KvCacheFormat::kBf16) {
    fail_value(prefix + " holds bf16 values, which only the bf16 format stores (kv_format = " +
               std::string(info.name) + ")");
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
  v.num_blocks = num_blocks;
  v.page_block_size = page_block_size;
  v.d_qk = d_qk;
  v.device = to_device(op, name, t);
  v.block_stride_bytes = t.stride(0) * elem;
  if (num_blocks == 1) {
    // The stride of a single block is never used to address anything; torch reports the packed
    // size, which for v4_fp8 is below the 576-byte-aligned stride the format prescribes.
    const int64_t min_stride = kv_cache_min_block_stride(fmt, page_block_size, d_qk);
    if (v.block_stride_bytes < min_stride) v.block_stride_bytes = min_stride;
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
