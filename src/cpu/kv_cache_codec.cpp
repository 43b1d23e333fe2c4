// Host KV-cache codec (kv_cache_codec.h): FlashMLA's reference quantizer, the dequantizer, the
// single-token packer and the scalar conversions. All byte addressing goes through
// cpu::KvTokenLayout (fp8.h), so every format of the traits table is handled by the same code.
#include "sparse_mla/kv_cache_codec.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/kv_cache_layout.h"
#include "core/validate.h"
#include "cpu/fp8.h"
#include "cpu/kv_cache_codec_checks.h"

namespace sparse_mla {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Checks a host cache view: in host memory, then the layout rules shared with sparse_decode
// (core/kv_cache_layout.h; an empty cache, num_blocks 0, is allowed here).
Status validate_cache(const char* fn, const KvCacheView& cache) {
  const std::string prefix = std::string(fn) + ": cache.";
  if (cache.data == nullptr) return invalid_argument(prefix + "data is null");
  if (cache.device.is_cuda()) {
    return invalid_argument(prefix + "device = " + to_string(cache.device) +
                            "; the host codec needs a cpu cache");
  }
  if (std::string e = detail::kv_cache_layout_error(cache, std::string(fn) + ": cache", 0);
      !e.empty()) {
    return invalid_argument(e);
  }
  return {};
}

// Checks a bf16/fp32 tensor that mirrors the cache: [num_blocks, page_block_size, 1, d_qk].
Status validate_rows(const char* fn, const char* arg, const TensorView& t, const KvCacheView& cache,
                     bool allow_fp32) {
  const std::string prefix = std::string(fn) + ": " + arg;
  if (t.data == nullptr && t.numel() != 0) return invalid_argument(prefix + ".data is null");
  if (t.device.is_cuda()) {
    return invalid_argument(prefix + ".device = " + to_string(t.device) +
                            "; the host codec needs a cpu tensor");
  }
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
  for (int d = 0; d < 3; ++d) {
    if (t.strides[d] < 0) {
      return invalid_argument(prefix + ".strides[" + str(d) + "] = " + str(t.strides[d]) +
                              " is negative");
    }
  }
  const size_t element = dtype_size(t.dtype);
  if (!detail::offsets_fit_int64(t, element)) {
    return invalid_argument(prefix + " (" + describe(t) +
                            ") spans more than 2^63 bytes: its strides overflow 64-bit offsets");
  }
  if (reinterpret_cast<uintptr_t>(t.data) % element != 0) {
    return invalid_argument(prefix + ".data is not aligned to its element size " + str(element));
  }
  return {};
}

detail::KvCacheParams to_params(const KvCacheView& cache) {
  detail::KvCacheParams p;
  p.data = static_cast<const uint8_t*>(cache.data);
  p.format = cache.format;
  p.layout = resolve_kv_layout(cache.format, cache.layout);
  p.num_blocks = cache.num_blocks;
  p.page_block_size = cache.page_block_size;
  p.block_stride_bytes = cache.block_stride_bytes;
  p.d_qk = cache.d_qk;
  return p;
}

// Writes one token's parts at `slot`: e4m3 [quantized_dims], raw scale bytes
// [num_scales * scale_bytes], tail [tail_dims] bf16 bits. Zeroes the scale row's padding.
void write_token(const cpu::KvTokenLayout& layout, uint8_t* base, int64_t slot, const uint8_t* e4m3,
                 const uint8_t* scale_bytes, const uint16_t* tail) {
  uint8_t* data = base + layout.data_offset(slot);
  if (layout.quantized_dims > 0) std::memcpy(data, e4m3, layout.quantized_dims);
  std::memcpy(data + layout.tail_offset, tail, sizeof(uint16_t) * layout.tail_dims);
  if (layout.num_scales > 0) {
    uint8_t* scales = base + layout.scale_byte_offset(slot);
    const int used = layout.num_scales * layout.scale_bytes;
    std::memcpy(scales, scale_bytes, used);
    std::memset(scales + used, 0, layout.scale_row_bytes - used);
  }
}

// Quantizes one row (bf16 bits [d_qk]) with the reference quantizer into its parts.
void quantize_row(const cpu::KvTokenLayout& layout, const uint16_t* row, uint8_t* e4m3,
                  uint8_t* scale_bytes) {
  for (int tile = 0; tile < layout.num_scales; ++tile) {
    const uint16_t* x = row + tile * layout.tile_size;
    float amax = 0.0f;
    bool has_nan = false;
    for (int i = 0; i < layout.tile_size; ++i) {
      const float a = std::fabs(cpu::bf16_to_float_inline(x[i]));
      has_nan |= std::isnan(a);
      amax = std::fmax(amax, a);
    }
    const float s =
        cpu::quantizer_tile_scale(has_nan ? std::numeric_limits<float>::quiet_NaN() : amax);
    for (int i = 0; i < layout.tile_size; ++i) {
      e4m3[tile * layout.tile_size + i] =
          cpu::float_to_e4m3_inline(cpu::bf16_to_float_inline(x[i]) / s);
    }
    if (layout.scale_encoding == ScaleEncoding::kFloat32) {
      std::memcpy(scale_bytes + 4 * tile, &s, 4);
    } else {
      scale_bytes[tile] = cpu::ue8m0_ceil_inline(s);
    }
  }
}

const uint16_t* row_ptr(const TensorView& t, int64_t block, int64_t token) {
  return t.data_as<const uint16_t>() + block * t.strides[0] + token * t.strides[1];
}

}  // namespace

namespace cpu {

Status check_quantize_args(const TensorView& kv_bf16, const KvCacheView& cache) {
  SMLA_RETURN_IF_ERROR(validate_cache("quantize_kv_cache", cache));
  return validate_rows("quantize_kv_cache", "kv_bf16", kv_bf16, cache, false);
}

Status check_dequantize_args(const KvCacheView& cache, const TensorView& kv_out) {
  SMLA_RETURN_IF_ERROR(validate_cache("dequantize_kv_cache", cache));
  return validate_rows("dequantize_kv_cache", "kv_out", kv_out, cache, true);
}

}  // namespace cpu

Status quantize_kv_cache(const TensorView& kv_bf16, const KvCacheView& cache,
                         const RunOptions& /*options*/) {
  SMLA_RETURN_IF_ERROR(cpu::check_quantize_args(kv_bf16, cache));
  const cpu::KvTokenLayout layout(cache.format, cache.layout, cache.page_block_size,
                                  cache.block_stride_bytes, cache.d_qk);
  // The codec writes through the view: the header asks for writable host memory.
  uint8_t* base = static_cast<uint8_t*>(const_cast<void*>(cache.data));
  std::vector<uint8_t> e4m3(layout.quantized_dims);
  std::vector<uint8_t> scale_bytes(layout.num_scales * layout.scale_bytes);
  for (int64_t block = 0; block < cache.num_blocks; ++block) {
    // Padding (block tail, scale-row padding, spare rows) ends up zero.
    std::memset(base + block * cache.block_stride_bytes, 0, cache.block_stride_bytes);
    for (int64_t t = 0; t < cache.page_block_size; ++t) {
      const uint16_t* row = row_ptr(kv_bf16, block, t);
      quantize_row(layout, row, e4m3.data(), scale_bytes.data());
      write_token(layout, base, block * cache.page_block_size + t, e4m3.data(), scale_bytes.data(),
                  row + layout.quantized_dims);
    }
  }
  return {};
}

Status dequantize_kv_cache(const KvCacheView& cache, const TensorView& kv_out,
                           const RunOptions& /*options*/) {
  SMLA_RETURN_IF_ERROR(cpu::check_dequantize_args(cache, kv_out));
  const cpu::KvTokenReader reader(to_params(cache));
  std::vector<float> row(cache.d_qk);
  for (int64_t block = 0; block < cache.num_blocks; ++block) {
    for (int64_t t = 0; t < cache.page_block_size; ++t) {
      reader.read(block * cache.page_block_size + t, row.data());
      const int64_t offset = block * kv_out.strides[0] + t * kv_out.strides[1];
      if (kv_out.dtype == DType::kFloat32) {
        std::memcpy(kv_out.data_as<float>() + offset, row.data(), sizeof(float) * cache.d_qk);
      } else {
        uint16_t* out = kv_out.data_as<uint16_t>() + offset;
        for (int i = 0; i < cache.d_qk; ++i) out[i] = cpu::float_to_bf16_inline(row[i]);
      }
    }
  }
  return {};
}

void dequantize_kv_token(const KvCacheView& cache, int64_t slot, float* row) {
  assert(slot >= 0 && slot < cache.num_slots());
  cpu::KvTokenReader(to_params(cache)).read(slot, row);
}

Status pack_kv_token(const KvCacheView& cache, int64_t slot, const uint8_t* e4m3,
                     const void* scales, const uint16_t* rope) {
  SMLA_RETURN_IF_ERROR(validate_cache("pack_kv_token", cache));
  if (slot < 0 || slot >= cache.num_slots()) {
    return invalid_argument("pack_kv_token: slot = " + str(slot) + " is out of range [0, " +
                            str(cache.num_slots()) + ")");
  }
  const cpu::KvTokenLayout layout(cache.format, cache.layout, cache.page_block_size,
                                  cache.block_stride_bytes, cache.d_qk);
  const std::string fmt(kv_cache_format_name(cache.format));
  if (rope == nullptr) return invalid_argument("pack_kv_token: rope is null");
  if (layout.quantized_dims > 0) {
    if (e4m3 == nullptr)
      return invalid_argument("pack_kv_token: e4m3 is null (format " + fmt + ")");
    if (scales == nullptr) {
      return invalid_argument("pack_kv_token: scales is null (format " + fmt + ")");
    }
  } else if (e4m3 != nullptr || scales != nullptr) {
    return invalid_argument("pack_kv_token: e4m3 and scales must be null for format " + fmt +
                            " (pass the whole row in rope)");
  }
  write_token(layout, static_cast<uint8_t*>(const_cast<void*>(cache.data)), slot, e4m3,
              static_cast<const uint8_t*>(scales), rope);
  return {};
}

float e4m3_to_float(uint8_t bits) { return cpu::e4m3_to_float_inline(bits); }
uint8_t float_to_e4m3(float x) { return cpu::float_to_e4m3_inline(x); }
float ue8m0_to_float(uint8_t bits) { return cpu::ue8m0_to_float_inline(bits); }
float bf16_to_float(uint16_t bits) { return cpu::bf16_to_float_inline(bits); }
uint16_t float_to_bf16(float x) { return cpu::float_to_bf16_inline(x); }

}  // namespace sparse_mla
