// The device KV-cache codec (kv_cache_codec.h, core/cuda_hooks.h): quantize_kv_cache,
// dequantize_kv_cache and write_kv_cache for every format and page layout of the traits table, as
// kernels on the caller's stream (no allocation, no synchronisation, CUDA-graph safe). The bytes
// equal the host codec's (src/cpu/kv_cache_codec.cpp): the same scalar rules (quantize_rules.h).
//
// One warp per token. Lane l owns values [16 l, 16 l + 16) of the quantized part (v32_fp8 and
// V4.1: all 32 lanes; v4_fp8: lanes 0..27), so a tile of T values is T / 16 lanes (v32_fp8 8,
// v4_fp8 4, v41_fp8 2, v41_fp4 1) and its amax is a butterfly over them; then the lanes copy the
// bf16 tail (RoPE, or a bf16 cache's whole row) in 16-B pieces. Loads and stores are vector-wide
// where the address allows and bytewise otherwise (v32_fp8 block strides need not be aligned).
//   write_kv_cache     rows[i] -> its slot slot_mapping[i]; slots outside [0, num_slots) skipped
//   quantize_kv_cache  every slot: one cudaMemsetAsync zeroes the cache (the layout's padding),
//                      then the writer's kernel quantizes kv_bf16[block, t] into slot
//                      block * pbs + t
//   dequantize_kv_cache every slot -> kv_out (bf16 or fp32): code value x scale in fp32, then the
//                      host's bf16 rounding; NaN results are the canonical quiet NaN
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/cuda_hooks.h"
#include "cuda/codec/quantize_rules.h"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/device_guard.h"
#include "sparse_mla/kv_cache_format.h"

namespace sparse_mla::cuda::codec {
namespace {

constexpr int kWarpsPerCta = 8;
constexpr int kThreads = 32 * kWarpsPerCta;

// Where a token's bytes lie (the host codec's cpu::KvTokenLayout, in device-friendly form):
//   data   = base + block * block_stride + t * data_row_bytes
//   scales = base + block * block_stride + scale_block_offset + t * scale_token_stride
//            + scale_offset
//   tail   = data + tail_offset (tail_dims bf16 values)
struct CacheBytes {
  uint8_t* base;
  int64_t page_block_size;
  int64_t block_stride;
  int64_t data_row_bytes;
  int64_t scale_block_offset;
  int64_t scale_token_stride;
  int64_t scale_offset;
  int64_t tail_offset;
  int tail_dims;
  int scale_pad;  // zero bytes after the scales in a page_split scale row (v4_fp8: 1)
  int64_t num_slots;
};

CacheBytes cache_bytes(const KvCacheView& cache) {
  const KvCacheFormatInfo& info = kv_cache_format_info(cache.format, cache.layout);
  CacheBytes c;
  c.base = static_cast<uint8_t*>(const_cast<void*>(cache.data));
  c.page_block_size = cache.page_block_size;
  c.block_stride = cache.block_stride_bytes;
  c.data_row_bytes = info.data_row_bytes != 0 ? info.data_row_bytes : 2 * int64_t{cache.d_qk};
  if (info.layout == KvLayout::kPageSplit) {
    c.scale_block_offset = cache.page_block_size * c.data_row_bytes;
    c.scale_token_stride = info.scale_row_bytes;
    c.scale_offset = 0;
    c.scale_pad = info.scale_row_bytes - info.num_scales * info.scale_bytes;
  } else {
    c.scale_block_offset = 0;
    c.scale_token_stride = c.data_row_bytes;
    c.scale_offset = info.scale_offset_in_row;
    c.scale_pad = 0;
  }
  c.tail_offset = info.tail_offset;
  c.tail_dims = cache.d_qk - info.quantized_dims;
  c.num_slots = cache.num_slots();
  return c;
}

// The quantized part of a format, at compile time (the traits table's numbers).
template <KvCacheFormat kFormat>
struct Quantized;
template <>
struct Quantized<KvCacheFormat::kV32Fp8> {
  static constexpr int kDims = 512, kTile = 128;
  static constexpr bool kFp4 = false, kScaleF32 = true;
};
template <>
struct Quantized<KvCacheFormat::kV4Fp8> {
  static constexpr int kDims = 448, kTile = 64;
  static constexpr bool kFp4 = false, kScaleF32 = false;
};
template <>
struct Quantized<KvCacheFormat::kBf16> {
  static constexpr int kDims = 0, kTile = 16;
  static constexpr bool kFp4 = false, kScaleF32 = false;
};
template <>
struct Quantized<KvCacheFormat::kV41Fp8> {
  static constexpr int kDims = 512, kTile = 32;
  static constexpr bool kFp4 = false, kScaleF32 = false;
};
template <>
struct Quantized<KvCacheFormat::kV41Fp4> {
  static constexpr int kDims = 512, kTile = 16;
  static constexpr bool kFp4 = true, kScaleF32 = false;
};

// ---- byte moves that tolerate any alignment --------------------------------------------------

// kBytes from src to dst: one kBytes-wide move where the address `at` (the side whose alignment is
// not known: the record's) allows it, else byte by byte.
template <int kBytes>
__device__ __forceinline__ void move_bytes(uint8_t* dst, const uint8_t* src, uintptr_t at) {
  if constexpr (kBytes == 16) {
    if (at % 16 == 0) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      return;
    }
  } else if constexpr (kBytes == 8) {
    if (at % 8 == 0) {
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src);
      return;
    }
  } else if constexpr (kBytes == 4) {
    if (at % 4 == 0) {
      *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < kBytes; ++i) dst[i] = src[i];
}

template <int kBytes>
__device__ __forceinline__ void store_bytes(uint8_t* dst, const uint8_t* src) {
  move_bytes<kBytes>(dst, src, reinterpret_cast<uintptr_t>(dst));
}

template <int kBytes>
__device__ __forceinline__ void load_bytes(uint8_t* dst, const uint8_t* src) {
  move_bytes<kBytes>(dst, src, reinterpret_cast<uintptr_t>(src));
}

// 16 bf16 values (2-B aligned source) -> fp32.
__device__ __forceinline__ void load_16_bf16(const uint16_t* src, float (&x)[16]) {
  alignas(16) uint16_t bits[16];
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
  if (reinterpret_cast<uintptr_t>(s) % 16 == 0) {
    *reinterpret_cast<uint4*>(bits) = *reinterpret_cast<const uint4*>(s);
    *reinterpret_cast<uint4*>(bits + 8) = *reinterpret_cast<const uint4*>(s + 16);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) bits[i] = src[i];
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = bf16_bits_to_float(bits[i]);
}

// ---- quantize one token (one warp) ----------------------------------------------------------

// Quantizes the row `row` (d_qk bf16, 2-B aligned) into `slot` of the cache: data, scales, scale
// padding, tail. Every lane of the warp calls it (the amax butterfly needs them all).
template <KvCacheFormat kFormat>
__device__ __forceinline__ void quantize_token(const CacheBytes& c, int64_t slot,
                                               const uint16_t* row, int lane) {
  using Q = Quantized<kFormat>;
  const int64_t block = slot / c.page_block_size;
  const int64_t t = slot - block * c.page_block_size;
  uint8_t* block_base = c.base + block * c.block_stride;
  uint8_t* data = block_base + t * c.data_row_bytes;
  uint8_t* scales = block_base + c.scale_block_offset + t * c.scale_token_stride + c.scale_offset;
  if constexpr (Q::kDims > 0) {
    constexpr int kLanesPerTile = Q::kTile / 16;  // 1, 2, 4, 8
    const bool active = lane * 16 < Q::kDims;
    float x[16];
    float amax = 0.0f;
    bool has_nan = false;
    if (active) {
      load_16_bf16(row + 16 * lane, x);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float a = fabsf(x[i]);
        has_nan |= is_nan(a);
        amax = fmaxf(amax, a);
      }
    }
    // The tile's lanes are kLanesPerTile consecutive lanes from a multiple of it.
#pragma unroll
    for (int offset = 1; offset < kLanesPerTile; offset <<= 1) {
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      has_nan |= __shfl_xor_sync(0xffffffffu, has_nan ? 1 : 0, offset) != 0;
    }
    if (active) {
      const int tile = lane / kLanesPerTile;
      const bool first_of_tile = lane % kLanesPerTile == 0;
      if constexpr (Q::kFp4) {
        const uint8_t scale_byte = fp4_tile_scale_byte(amax, has_nan);
        const float s = e4m3_value(scale_byte);
        alignas(8) uint8_t packed[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          packed[i] = static_cast<uint8_t>(float_to_e2m1(x[2 * i] / s) |
                                           (float_to_e2m1(x[2 * i + 1] / s) << 4));
        }
        store_bytes<8>(data + 8 * lane, packed);
        scales[tile] = scale_byte;
      } else {
        const float s = fp8_tile_scale(has_nan ? bits_float(0x7fc00000u) : amax);
        alignas(16) uint8_t q[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) q[i] = float_to_e4m3(x[i] / s);
        store_bytes<16>(data + 16 * lane, q);
        if (first_of_tile) {
          if constexpr (Q::kScaleF32) {
            alignas(4) uint8_t s_bytes[4];
            *reinterpret_cast<float*>(s_bytes) = s;
            store_bytes<4>(scales + 4 * tile, s_bytes);
          } else {
            scales[tile] = ue8m0_ceil(s);
          }
        }
      }
    }
    constexpr int kScaleBytes = Q::kScaleF32 ? 4 : 1;
    constexpr int kNumScales = Q::kDims / Q::kTile;
    if (lane < c.scale_pad) scales[kNumScales * kScaleBytes + lane] = 0;
  }
  // The bf16 tail, copied as is: 16-B pieces (tail_dims is a multiple of 8).
  const int pieces = c.tail_dims / 8;
  const uint8_t* tail_src = reinterpret_cast<const uint8_t*>(row + Q::kDims);
  uint8_t* tail_dst = data + c.tail_offset;
  for (int p = lane; p < pieces; p += 32) {
    alignas(16) uint8_t piece[16];
    load_bytes<16>(piece, tail_src + 16 * p);
    store_bytes<16>(tail_dst + 16 * p, piece);
  }
}

// Where the writer's token i comes from and goes to.
struct WriteRows {
  const uint16_t* rows;         // write_kv_cache: rows [n, d_qk]; quantize_kv_cache: kv_bf16
  int64_t row_stride;           // elements between rows (write_kv_cache)
  const int32_t* slot_mapping;  // [n] (write_kv_cache), nullptr: token i is slot i
  int64_t slot_stride;          // elements between slot_mapping entries
  int64_t block_stride_elems;   // quantize_kv_cache: kv_bf16.strides[0], strides[1]
  int64_t token_stride_elems;
  int64_t n;
};

template <KvCacheFormat kFormat>
__global__ void __launch_bounds__(kThreads)
    write_tokens_kernel(const CacheBytes c, const WriteRows w) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerCta;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + threadIdx.x / 32; i < w.n;
       i += warps) {
    int64_t slot;
    const uint16_t* row;
    if (w.slot_mapping != nullptr) {
      slot = w.slot_mapping[i * w.slot_stride];
      if (slot < 0 || slot >= c.num_slots) continue;  // padding tokens, and what cannot be stored
      row = w.rows + i * w.row_stride;
    } else {
      slot = i;
      const int64_t block = i / c.page_block_size;
      row = w.rows + block * w.block_stride_elems +
            (i - block * c.page_block_size) * w.token_stride_elems;
    }
    quantize_token<kFormat>(c, slot, row, lane);
  }
}

// ---- dequantize -----------------------------------------------------------------------------

struct ReadRows {
  void* out;  // kv_out [num_blocks, pbs, 1, d_qk] bf16 or fp32
  bool fp32;
  int64_t block_stride_elems, token_stride_elems;
  int d_qk;
};

// A product whose result is NaN is written as the canonical quiet NaN.
__device__ __forceinline__ float canonical(float x) {
  return is_nan(x) ? bits_float(0x7fc00000u) : x;
}

template <KvCacheFormat kFormat>
__global__ void __launch_bounds__(kThreads)
    read_tokens_kernel(const CacheBytes c, const ReadRows r) {
  using Q = Quantized<kFormat>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerCta;
  const int groups = r.d_qk / 16;
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + threadIdx.x / 32;
       slot < c.num_slots; slot += warps) {
    const int64_t block = slot / c.page_block_size;
    const int64_t t = slot - block * c.page_block_size;
    const uint8_t* block_base = c.base + block * c.block_stride;
    const uint8_t* data = block_base + t * c.data_row_bytes;
    const uint8_t* scales =
        block_base + c.scale_block_offset + t * c.scale_token_stride + c.scale_offset;
    const int64_t out_offset = block * r.block_stride_elems + t * r.token_stride_elems;
    for (int g = lane; g < groups; g += 32) {
      float v[16];
      if (g * 16 < Q::kDims) {
        const int tile = g * 16 / Q::kTile;
        float s;
        if constexpr (Q::kScaleF32) {
          alignas(4) uint8_t b[4];
          load_bytes<4>(b, scales + 4 * tile);
          s = *reinterpret_cast<const float*>(b);
        } else if constexpr (Q::kFp4) {
          s = e4m3_value(scales[tile]);
        } else {
          s = ue8m0_value(scales[tile]);
        }
        if constexpr (Q::kFp4) {
          alignas(8) uint8_t b[8];
          load_bytes<8>(b, data + 8 * g);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            v[2 * i] = canonical(e2m1_value(b[i] & 0xfu) * s);
            v[2 * i + 1] = canonical(e2m1_value(b[i] >> 4) * s);
          }
        } else {
          alignas(16) uint8_t b[16];
          load_bytes<16>(b, data + 16 * g);
#pragma unroll
          for (int i = 0; i < 16; ++i) v[i] = canonical(e4m3_value(b[i]) * s);
        }
      } else {
        alignas(16) uint8_t b[32];
        const uint8_t* tail = data + c.tail_offset + 32 * (g - Q::kDims / 16);
        load_bytes<16>(b, tail);
        load_bytes<16>(b + 16, tail + 16);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          v[i] = bf16_bits_to_float(static_cast<uint32_t>(b[2 * i]) |
                                    (static_cast<uint32_t>(b[2 * i + 1]) << 8));
        }
      }
      if (r.fp32) {
        float* out = static_cast<float*>(r.out) + out_offset + 16 * g;
        alignas(16) float o[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) o[i] = v[i];
        const uint8_t* src = reinterpret_cast<const uint8_t*>(o);
        uint8_t* dst = reinterpret_cast<uint8_t*>(out);
#pragma unroll
        for (int q = 0; q < 4; ++q) store_bytes<16>(dst + 16 * q, src + 16 * q);
      } else {
        uint16_t* out = static_cast<uint16_t*>(r.out) + out_offset + 16 * g;
        alignas(16) uint16_t o[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) o[i] = float_to_bf16_bits(v[i]);
        const uint8_t* src = reinterpret_cast<const uint8_t*>(o);
        uint8_t* dst = reinterpret_cast<uint8_t*>(out);
        store_bytes<16>(dst, src);
        store_bytes<16>(dst + 16, src + 16);
      }
    }
  }
}

// ---- launches ------------------------------------------------------------------------------

// CTAs for n warp-items: one warp each, up to a grid that fills any GPU many times over (the
// kernels loop over the rest).
unsigned grid_for(int64_t n) {
  const int64_t ctas = (n + kWarpsPerCta - 1) / kWarpsPerCta;
  return static_cast<unsigned>(ctas < 65535 * 16 ? (ctas > 0 ? ctas : 1) : 65535 * 16);
}

template <template <KvCacheFormat> class Launch, class... Args>
Status for_format(KvCacheFormat format, Args&&... args) {
  switch (format) {
    case KvCacheFormat::kV32Fp8:
      return Launch<KvCacheFormat::kV32Fp8>::run(args...);
    case KvCacheFormat::kV4Fp8:
      return Launch<KvCacheFormat::kV4Fp8>::run(args...);
    case KvCacheFormat::kBf16:
      return Launch<KvCacheFormat::kBf16>::run(args...);
    case KvCacheFormat::kV41Fp8:
      return Launch<KvCacheFormat::kV41Fp8>::run(args...);
    case KvCacheFormat::kV41Fp4:
      return Launch<KvCacheFormat::kV41Fp4>::run(args...);
  }
  return invalid_argument("kv cache codec: format " + std::to_string(static_cast<int>(format)) +
                          " is not a KV-cache format of this build");
}

template <KvCacheFormat kFormat>
struct LaunchWrite {
  static Status run(const CacheBytes& c, const WriteRows& w, cudaStream_t stream) {
    if (w.n == 0) return {};
    write_tokens_kernel<kFormat><<<grid_for(w.n), kThreads, 0, stream>>>(c, w);
    return check_last_launch("write_tokens_kernel");
  }
};

template <KvCacheFormat kFormat>
struct LaunchRead {
  static Status run(const CacheBytes& c, const ReadRows& r, cudaStream_t stream) {
    if (c.num_slots == 0) return {};
    read_tokens_kernel<kFormat><<<grid_for(c.num_slots), kThreads, 0, stream>>>(c, r);
    return check_last_launch("read_tokens_kernel");
  }
};

}  // namespace
}  // namespace sparse_mla::cuda::codec

namespace sparse_mla::detail {

Status cuda_quantize_kv_cache_impl(const TensorView& kv_bf16, const KvCacheView& cache,
                                   StreamHandle stream) {
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(cache.device.index));
  const cuda::codec::CacheBytes c = cuda::codec::cache_bytes(cache);
  auto s = static_cast<cudaStream_t>(stream);
  // The layout's padding (block tail, v4_fp8's scale-row byte, spare rows) ends up zero.
  if (cache.num_blocks > 0) {
    SMLA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        c.base, 0, static_cast<size_t>(cache.num_blocks * cache.block_stride_bytes), s));
  }
  cuda::codec::WriteRows w{};
  w.rows = static_cast<const uint16_t*>(kv_bf16.data);
  w.slot_mapping = nullptr;
  w.block_stride_elems = kv_bf16.strides[0];
  w.token_stride_elems = kv_bf16.strides[1];
  w.n = c.num_slots;
  return cuda::codec::for_format<cuda::codec::LaunchWrite>(cache.format, c, w, s);
}

Status cuda_dequantize_kv_cache_impl(const KvCacheView& cache, const TensorView& kv_out,
                                     StreamHandle stream) {
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(cache.device.index));
  const cuda::codec::CacheBytes c = cuda::codec::cache_bytes(cache);
  cuda::codec::ReadRows r{};
  r.out = kv_out.data;
  r.fp32 = kv_out.dtype == DType::kFloat32;
  r.block_stride_elems = kv_out.strides[0];
  r.token_stride_elems = kv_out.strides[1];
  r.d_qk = cache.d_qk;
  return cuda::codec::for_format<cuda::codec::LaunchRead>(cache.format, c, r,
                                                          static_cast<cudaStream_t>(stream));
}

Status cuda_write_kv_cache_impl(const TensorView& rows, const TensorView& slot_mapping,
                                const KvCacheView& cache, StreamHandle stream) {
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(cache.device.index));
  const cuda::codec::CacheBytes c = cuda::codec::cache_bytes(cache);
  cuda::codec::WriteRows w{};
  w.rows = static_cast<const uint16_t*>(rows.data);
  w.row_stride = rows.strides[0];
  w.slot_mapping = static_cast<const int32_t*>(slot_mapping.data);
  w.slot_stride = slot_mapping.strides[0];
  w.n = rows.sizes[0];
  return cuda::codec::for_format<cuda::codec::LaunchWrite>(cache.format, c, w,
                                                           static_cast<cudaStream_t>(stream));
}

}  // namespace sparse_mla::detail
