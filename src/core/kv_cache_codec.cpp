// The codec's public entry points (kv_cache_codec.h): check the arguments (the same rules for
// every device), then run the host codec (src/cpu/kv_cache_codec.cpp) for host memory or the
// device codec (detail::cuda_*_impl, src/cuda) on options.stream for CUDA memory.
#include "sparse_mla/kv_cache_codec.h"

#include <cstdint>
#include <string>

#include "core/cuda_hooks.h"
#include "core/kv_cache_codec_checks.h"
#include "core/kv_cache_layout.h"
#include "core/validate.h"
#include "cpu/kv_cache_codec.h"

namespace sparse_mla {
namespace detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

bool known_device(const Device& d) { return d.type == DeviceType::kCpu || d.is_cuda(); }

std::string device_text(const Device& d) {
  return known_device(d) ? to_string(d) : "device type " + str(static_cast<int>(d.type));
}

// A cache view: known device, non-null data, the layout rules shared with sparse_decode
// (core/kv_cache_layout.h; an empty cache, num_blocks 0, is allowed here).
Status check_cache(const char* fn, const KvCacheView& cache) {
  const std::string prefix = std::string(fn) + ": cache.";
  if (!known_device(cache.device)) {
    return invalid_argument(prefix + "device = " + device_text(cache.device) +
                            " is neither the cpu nor a CUDA device");
  }
  if (cache.data == nullptr) return invalid_argument(prefix + "data is null");
  if (std::string e = kv_cache_layout_error(cache, std::string(fn) + ": cache", 0); !e.empty()) {
    return invalid_argument(e);
  }
  return {};
}

// `t` lives where the cache does.
Status check_same_device(const char* fn, const char* arg, const TensorView& t,
                         const KvCacheView& cache) {
  if (t.device == cache.device) return {};
  return invalid_argument(std::string(fn) + ": " + arg + ".device = " + device_text(t.device) +
                          " differs from cache.device = " + device_text(cache.device) +
                          " (the codec runs where the cache is)");
}

// Non-negative strides, offsets within int64 and an element-aligned pointer.
Status check_strides(const std::string& prefix, const TensorView& t) {
  for (int d = 0; d < t.rank; ++d) {
    if (t.strides[d] < 0) {
      return invalid_argument(prefix + ".strides[" + str(d) + "] = " + str(t.strides[d]) +
                              " is negative");
    }
  }
  const size_t element = dtype_size(t.dtype);
  if (!offsets_fit_int64(t, element)) {
    return invalid_argument(prefix + " (" + describe(t) +
                            ") spans more than 2^63 bytes: its strides overflow 64-bit offsets");
  }
  if (reinterpret_cast<uintptr_t>(t.data) % element != 0) {
    return invalid_argument(prefix + ".data is not aligned to its element size " + str(element));
  }
  return {};
}

// A bf16/fp32 tensor that mirrors the cache: [num_blocks, page_block_size, 1, d_qk].
Status check_rows_like_cache(const char* fn, const char* arg, const TensorView& t,
                             const KvCacheView& cache, bool allow_fp32) {
  const std::string prefix = std::string(fn) + ": " + arg;
  SMLA_RETURN_IF_ERROR(check_same_device(fn, arg, t, cache));
  if (t.data == nullptr && t.numel() != 0) return invalid_argument(prefix + ".data is null");
  if (t.dtype != DType::kBFloat16 && !(allow_fp32 && t.dtype == DType::kFloat32)) {
    return invalid_argument(prefix + ".dtype = " + dtype_name(t.dtype) + " must be bf16" +
                            (allow_fp32 ? " or fp32" : ""));
  }
  if (t.rank != 4) {
    return invalid_argument(prefix + " is " + describe(t) +
                            "; expected rank 4 [num_blocks, page_block_size, 1, d_qk]");
  }
  const int64_t expected[4] = {cache.num_blocks, cache.page_block_size, 1, cache.d_qk};
  const char* names[4] = {"num_blocks", "page_block_size", "h_kv", "d_qk"};
  for (int d = 0; d < 4; ++d) {
    if (t.sizes[d] != expected[d]) {
      return invalid_argument(prefix + ".sizes[" + str(d) + "] (" + names[d] + ") = " +
                              str(t.sizes[d]) + " does not match the cache's " + str(expected[d]));
    }
  }
  if (t.strides[3] != 1) {
    return invalid_argument(prefix + ".strides[3] = " + str(t.strides[3]) +
                            " must be 1 (last dim contiguous)");
  }
  return check_strides(prefix, t);
}

// Auto runs where the data is; an explicit back end must match it (cpu and reference both mean
// the host codec).
Status check_backend(const char* fn, const RunOptions& options, const Device& device) {
  SMLA_RETURN_IF_ERROR(validate_run_options(fn, options));
  if (options.backend == Backend::kAuto) return {};
  if ((options.backend == Backend::kCuda) != device.is_cuda()) {
    return invalid_argument(std::string(fn) + ": options.backend = " +
                            backend_name(options.backend) + " cannot run on a cache on " +
                            to_string(device));
  }
  return {};
}

}  // namespace

Status check_quantize_args(const TensorView& kv_bf16, const KvCacheView& cache) {
  SMLA_RETURN_IF_ERROR(check_cache("quantize_kv_cache", cache));
  return check_rows_like_cache("quantize_kv_cache", "kv_bf16", kv_bf16, cache, false);
}

Status check_dequantize_args(const KvCacheView& cache, const TensorView& kv_out) {
  SMLA_RETURN_IF_ERROR(check_cache("dequantize_kv_cache", cache));
  return check_rows_like_cache("dequantize_kv_cache", "kv_out", kv_out, cache, true);
}

Status check_write_args(const TensorView& rows, const TensorView& slot_mapping,
                        const KvCacheView& cache) {
  constexpr const char* fn = "write_kv_cache";
  SMLA_RETURN_IF_ERROR(check_cache(fn, cache));
  SMLA_RETURN_IF_ERROR(check_same_device(fn, "rows", rows, cache));
  SMLA_RETURN_IF_ERROR(check_same_device(fn, "slot_mapping", slot_mapping, cache));
  const std::string r = std::string(fn) + ": rows";
  if (rows.dtype != DType::kBFloat16) {
    return invalid_argument(r + ".dtype = " + dtype_name(rows.dtype) + " must be bf16");
  }
  if (rows.rank != 2) {
    return invalid_argument(r + " is " + describe(rows) + "; expected rank 2 [n, d_qk]");
  }
  if (rows.sizes[0] < 0) {
    return invalid_argument(r + ".sizes[0] (n) = " + str(rows.sizes[0]) + " is negative");
  }
  if (rows.sizes[1] != cache.d_qk) {
    return invalid_argument(r + ".sizes[1] (d_qk) = " + str(rows.sizes[1]) +
                            " does not match the cache's " + str(cache.d_qk));
  }
  if (rows.strides[1] != 1) {
    return invalid_argument(r + ".strides[1] = " + str(rows.strides[1]) +
                            " must be 1 (last dim contiguous)");
  }
  if (rows.data == nullptr && rows.numel() != 0) return invalid_argument(r + ".data is null");
  SMLA_RETURN_IF_ERROR(check_strides(r, rows));
  const std::string s = std::string(fn) + ": slot_mapping";
  if (slot_mapping.dtype != DType::kInt32) {
    return invalid_argument(s + ".dtype = " + dtype_name(slot_mapping.dtype) + " must be int32");
  }
  if (slot_mapping.rank != 1) {
    return invalid_argument(s + " is " + describe(slot_mapping) + "; expected rank 1 [n]");
  }
  if (slot_mapping.sizes[0] != rows.sizes[0]) {
    return invalid_argument(s + ".sizes[0] = " + str(slot_mapping.sizes[0]) +
                            " differs from rows.sizes[0] (n) = " + str(rows.sizes[0]));
  }
  if (slot_mapping.data == nullptr && slot_mapping.numel() != 0) {
    return invalid_argument(s + ".data is null");
  }
  return check_strides(s, slot_mapping);
}

}  // namespace detail

Status quantize_kv_cache(const TensorView& kv_bf16, const KvCacheView& cache,
                         const RunOptions& options) {
  SMLA_RETURN_IF_ERROR(detail::check_quantize_args(kv_bf16, cache));
  SMLA_RETURN_IF_ERROR(detail::check_backend("quantize_kv_cache", options, cache.device));
  if (cache.device.is_cuda()) {
    return detail::cuda_quantize_kv_cache_impl(kv_bf16, cache, options.stream);
  }
  return cpu::quantize_kv_cache_host(kv_bf16, cache, options.num_threads);
}

Status dequantize_kv_cache(const KvCacheView& cache, const TensorView& kv_out,
                           const RunOptions& options) {
  SMLA_RETURN_IF_ERROR(detail::check_dequantize_args(cache, kv_out));
  SMLA_RETURN_IF_ERROR(detail::check_backend("dequantize_kv_cache", options, cache.device));
  if (cache.device.is_cuda()) {
    return detail::cuda_dequantize_kv_cache_impl(cache, kv_out, options.stream);
  }
  return cpu::dequantize_kv_cache_host(cache, kv_out, options.num_threads);
}

Status write_kv_cache(const TensorView& rows, const TensorView& slot_mapping,
                      const KvCacheView& cache, const RunOptions& options) {
  SMLA_RETURN_IF_ERROR(detail::check_write_args(rows, slot_mapping, cache));
  SMLA_RETURN_IF_ERROR(detail::check_backend("write_kv_cache", options, cache.device));
  if (cache.device.is_cuda()) {
    return detail::cuda_write_kv_cache_impl(rows, slot_mapping, cache, options.stream);
  }
  return cpu::write_kv_cache_host(rows, slot_mapping, cache, options.num_threads);
}

}  // namespace sparse_mla
