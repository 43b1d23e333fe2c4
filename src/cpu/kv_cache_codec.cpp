// Host KV-cache codec (cpu/kv_cache_codec.h, kv_cache_codec.h's rules): the reference quantizers
// (FP8: FlashMLA's; FP4: DeepSeek V4.1's), the dequantizer, the cache writer, the single-token
// packer and the scalar conversions. All byte addressing goes through cpu::KvTokenLayout (fp8.h),
// so every (format, layout) row of the traits table is handled by the same code.
#include "cpu/kv_cache_codec.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/kv_cache_layout.h"
#include "cpu/fp8.h"
#include "cpu/parallel_for.h"
#include "sparse_mla/kv_cache_codec.h"

namespace sparse_mla {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The largest token parts of any format: 512 quantized bytes, 32 scale bytes (v41_fp4; v32_fp8
// has 4 x 4).
constexpr int kMaxQuantizedBytes = 512;
constexpr int kMaxScaleBytes = 32;
constexpr int kMaxRowDims = 576;  // the largest d_qk of any format

// Values quantized per task before another thread pays off (~0.1 ms of work).
constexpr int64_t kValuesPerTask = 1 << 16;

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

cpu::KvTokenLayout layout_of(const KvCacheView& cache) {
  return cpu::KvTokenLayout(cache.format, resolve_kv_layout(cache.format, cache.layout),
                            cache.page_block_size, cache.block_stride_bytes, cache.d_qk);
}

// Writes one token's parts at `slot`: quantized bytes [quantized_bytes], raw scale bytes
// [num_scales * scale_bytes], tail [tail_dims] bf16 bits. Zeroes the scale row's padding.
void write_token(const cpu::KvTokenLayout& layout, uint8_t* base, int64_t slot,
                 const uint8_t* values, const uint8_t* scale_bytes, const uint16_t* tail) {
  uint8_t* data = base + layout.data_offset(slot);
  if (layout.quantized_bytes > 0) std::memcpy(data, values, layout.quantized_bytes);
  if (layout.tail_dims > 0) {
    std::memcpy(data + layout.tail_offset, tail, sizeof(uint16_t) * layout.tail_dims);
  }
  if (layout.num_scales > 0) {
    uint8_t* scales = base + layout.scale_byte_offset(slot);
    const int used = layout.num_scales * layout.scale_bytes;
    std::memcpy(scales, scale_bytes, used);
    std::memset(scales + used, 0, layout.scale_row_bytes - used);
  }
}

// The amax of a tile of bf16 values and whether one of them is NaN (fmax skips NaN).
std::pair<float, bool> tile_amax(const uint16_t* x, int n) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(cpu::bf16_to_float_inline(x[i]));
    has_nan |= std::isnan(a);
    amax = std::fmax(amax, a);
  }
  return {amax, has_nan};
}

// Quantizes one row (bf16 bits [d_qk]) into its parts with the reference quantizer of its
// format: FP8 tiles (e4m3 values, fp32 or ue8m0 power-of-two scales) or FP4 tiles (e2m1 pairs,
// e4m3 scales).
void quantize_row(const cpu::KvTokenLayout& layout, const uint16_t* row, uint8_t* values,
                  uint8_t* scale_bytes) {
  const int n = layout.tile_size;
  for (int tile = 0; tile < layout.num_scales; ++tile) {
    const uint16_t* x = row + tile * n;
    const auto [amax, has_nan] = tile_amax(x, n);
    if (layout.value_encoding == ValueEncoding::kE2m1) {
      // scale = e4m3(clamp(amax / 6, 2^-9, 448)); code = e2m1(x / scale), the quotient an fp32
      // division by the scale's fp32 value, rounded to nearest even and saturated; NaN -> 0.
      const uint8_t scale_code = cpu::fp4_tile_scale_byte(amax, has_nan);
      const float s = cpu::e4m3_to_float_inline(scale_code);
      uint8_t* packed = values + tile * n / 2;
      for (int i = 0; i < n; i += 2) {
        const uint8_t lo = cpu::float_to_e2m1_inline(cpu::bf16_to_float_inline(x[i]) / s);
        const uint8_t hi = cpu::float_to_e2m1_inline(cpu::bf16_to_float_inline(x[i + 1]) / s);
        packed[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
      scale_bytes[tile] = scale_code;
      continue;
    }
    const float s =
        cpu::quantizer_tile_scale(has_nan ? std::numeric_limits<float>::quiet_NaN() : amax);
    for (int i = 0; i < n; ++i) {
      values[tile * n + i] = cpu::float_to_e4m3_inline(cpu::bf16_to_float_inline(x[i]) / s);
    }
    if (layout.scale_encoding == ScaleEncoding::kFloat32) {
      std::memcpy(scale_bytes + 4 * tile, &s, 4);
    } else {
      scale_bytes[tile] = cpu::ue8m0_ceil_inline(s);
    }
  }
}

// Quantizes `row` and stores it as the record of `slot`.
void quantize_token(const cpu::KvTokenLayout& layout, uint8_t* base, int64_t slot,
                    const uint16_t* row) {
  std::array<uint8_t, kMaxQuantizedBytes> values;
  std::array<uint8_t, kMaxScaleBytes> scale_bytes;
  quantize_row(layout, row, values.data(), scale_bytes.data());
  write_token(layout, base, slot, values.data(), scale_bytes.data(), row + layout.quantized_dims);
}

const uint16_t* row_ptr(const TensorView& t, int64_t block, int64_t token) {
  return t.data_as<const uint16_t>() + block * t.strides[0] + token * t.strides[1];
}

// Tasks of whole blocks, each about kValuesPerTask values.
int64_t blocks_per_task(const KvCacheView& cache) {
  return std::max<int64_t>(
      1, kValuesPerTask / std::max<int64_t>(1, cache.page_block_size * cache.d_qk));
}

// Runs fn(first_block, end_block) over the cache's blocks on up to `num_threads` threads.
template <typename Fn>
void for_block_ranges(const KvCacheView& cache, int num_threads, Fn&& fn) {
  const int64_t per_task = blocks_per_task(cache);
  const int64_t tasks = (cache.num_blocks + per_task - 1) / per_task;
  cpu::parallel_for(tasks, cpu::worker_count(tasks, num_threads), [&](int64_t task, int) {
    fn(task * per_task, std::min(cache.num_blocks, (task + 1) * per_task));
  });
}

}  // namespace

namespace cpu {

Status quantize_kv_cache_host(const TensorView& kv_bf16, const KvCacheView& cache,
                              int num_threads) {
  const KvTokenLayout layout = layout_of(cache);
  // The codec writes through the view: the header asks for writable memory.
  uint8_t* base = static_cast<uint8_t*>(const_cast<void*>(cache.data));
  for_block_ranges(cache, num_threads, [&](int64_t first, int64_t end) {
    for (int64_t block = first; block < end; ++block) {
      // Padding (block tail, scale-row padding, spare rows) ends up zero.
      std::memset(base + block * cache.block_stride_bytes, 0, cache.block_stride_bytes);
      for (int64_t t = 0; t < cache.page_block_size; ++t) {
        quantize_token(layout, base, block * cache.page_block_size + t, row_ptr(kv_bf16, block, t));
      }
    }
  });
  return {};
}

Status dequantize_kv_cache_host(const KvCacheView& cache, const TensorView& kv_out,
                                int num_threads) {
  const KvTokenReader reader(to_params(cache));
  for_block_ranges(cache, num_threads, [&](int64_t first, int64_t end) {
    float row[kMaxRowDims];
    for (int64_t block = first; block < end; ++block) {
      for (int64_t t = 0; t < cache.page_block_size; ++t) {
        reader.read(block * cache.page_block_size + t, row);
        const int64_t offset = block * kv_out.strides[0] + t * kv_out.strides[1];
        if (kv_out.dtype == DType::kFloat32) {
          std::memcpy(kv_out.data_as<float>() + offset, row, sizeof(float) * cache.d_qk);
        } else {
          uint16_t* out = kv_out.data_as<uint16_t>() + offset;
          for (int i = 0; i < cache.d_qk; ++i) out[i] = float_to_bf16_inline(row[i]);
        }
      }
    }
  });
  return {};
}

Status write_kv_cache_host(const TensorView& rows, const TensorView& slot_mapping,
                           const KvCacheView& cache, int num_threads) {
  const int64_t n = rows.sizes[0];
  const int32_t* slots = slot_mapping.data_as<const int32_t>();
  const int64_t slot_stride = slot_mapping.strides[0];
  const int64_t num_slots = cache.num_slots();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = slots[i * slot_stride];
    if (slot >= num_slots) {
      return invalid_argument("write_kv_cache: slot_mapping[" + str(i) + "] = " + str(slot) +
                              " is out of range for a cache of " + str(num_slots) +
                              " slots (a slot < 0 is skipped; valid slots are [0, " +
                              str(num_slots) + "))");
    }
  }
  // The rows to write, one per distinct slot: the last row mapped to it. Sorted by slot, rows
  // of one slot latest first, so that std::unique keeps that row and no two threads write one
  // record.
  std::vector<std::pair<int32_t, int64_t>> order;
  try {
    order.reserve(n);
  } catch (const std::bad_alloc&) {
    return {StatusCode::kDeviceError,
            "write_kv_cache: out of host memory for " + str(n) + " slot entries"};
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = slots[i * slot_stride];
    if (slot >= 0) order.emplace_back(slot, i);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  order.erase(std::unique(order.begin(), order.end(),
                          [](const auto& a, const auto& b) { return a.first == b.first; }),
              order.end());
  const KvTokenLayout layout = layout_of(cache);
  uint8_t* base = static_cast<uint8_t*>(const_cast<void*>(cache.data));
  const int64_t count = static_cast<int64_t>(order.size());
  const int64_t per_task = std::max<int64_t>(1, kValuesPerTask / cache.d_qk);
  const int64_t tasks = (count + per_task - 1) / per_task;
  cpu::parallel_for(tasks, cpu::worker_count(tasks, num_threads), [&](int64_t task, int) {
    for (int64_t k = task * per_task; k < std::min(count, (task + 1) * per_task); ++k) {
      const auto [slot, i] = order[k];
      quantize_token(layout, base, slot, rows.data_as<const uint16_t>() + i * rows.strides[0]);
    }
  });
  return {};
}

}  // namespace cpu

void dequantize_kv_token(const KvCacheView& cache, int64_t slot, float* row) {
  assert(slot >= 0 && slot < cache.num_slots());
  cpu::KvTokenReader(to_params(cache)).read(slot, row);
}

Status pack_kv_token(const KvCacheView& cache, int64_t slot, const uint8_t* e4m3,
                     const void* scales, const uint16_t* rope) {
  if (cache.data == nullptr) return invalid_argument("pack_kv_token: cache.data is null");
  if (cache.device.type != DeviceType::kCpu) {
    return invalid_argument("pack_kv_token: cache.device = " + to_string(cache.device) +
                            "; the token packer writes host caches (use write_kv_cache on a "
                            "device)");
  }
  if (std::string e = detail::kv_cache_layout_error(cache, "pack_kv_token: cache", 0); !e.empty()) {
    return invalid_argument(e);
  }
  if (slot < 0 || slot >= cache.num_slots()) {
    return invalid_argument("pack_kv_token: slot = " + str(slot) + " is out of range [0, " +
                            str(cache.num_slots()) + ")");
  }
  const cpu::KvTokenLayout layout = layout_of(cache);
  const std::string fmt(kv_cache_format_name(cache.format));
  if (layout.tail_dims > 0 && rope == nullptr) {
    return invalid_argument("pack_kv_token: rope is null (format " + fmt + " has " +
                            str(layout.tail_dims) + " bf16 values after the quantized ones)");
  }
  if (layout.tail_dims == 0 && rope != nullptr) {
    return invalid_argument("pack_kv_token: rope must be null for format " + fmt +
                            " (every dim is quantized)");
  }
  if (layout.quantized_dims > 0) {
    if (e4m3 == nullptr) {
      return invalid_argument("pack_kv_token: e4m3 is null (format " + fmt + ")");
    }
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
float e2m1_to_float(uint8_t code) { return cpu::e2m1_to_float_inline(code); }
uint8_t float_to_e2m1(float x) { return cpu::float_to_e2m1_inline(x); }

}  // namespace sparse_mla
