// The f16 operands of the Hopper decode over a v4_fp8 cache (seesaw/operands.cuh,
// F16NopeOperands; docs/kernels/sm90a_sparse_decode.md): Q's quantised panels and each block's
// e4m3 values in f16, scaled by powers of two into f16's range, the RoPE panels in bf16.
//
//   Q (both consumer warpgroups, once per work item, in place once it landed): row h times 2^kq(h),
//     kq = 14 - the exponent of the row's largest |q| (nope and RoPE dims), at most 64
//     (and >= -113 from bf16's range), so the row's largest value lies in [2^14, 2^15): the f16
//     panels exact for every value above 2^-10 of it (smaller ones carry at most 2^-25 absolute
//     error, below fp32 accumulation's), the bf16 RoPE panel exact. sm.q_scale[h] = the softmax
//     scale x log2 e x 2^-kq(h).
//   A block (its scoring warpgroup, in place, as convert_half does for bf16): every value
//     e4m3 x 2^(E + c) in f16 (one cvt and one multiply per two values), E its tile's ue8m0
//     exponent, c one shift for the whole block: 0 when every valid tile's E lies in [-15, 7]
//     (then every product is exact in f16: e4m3 spans 2^-9 .. 448), else the shift that brings the
//     largest E to 7 (at most 7 down, so that P x 2^-c <= 2^8 x 2^7 stays in f16) or the
//     smallest to -15 (at most 14 up, never past the largest's room). The RoPE panel is
//     multiplied by 2^c in bf16 (exact). sm.kv_scale[stage] = 2^-c.
// Domain: a block whose largest tile scale exceeds 2^14 (|k| > 7.3e6) overflows f16 (inf, then NaN
// in the output: loud, not silently wrong); tiles below 2^-10 of the block's largest are rounded
// in f16's subnormals (absolute error <= 2^-25 x 2^-c, below the output's bf16 rounding).
// An e4m3 NaN code stays NaN; a NaN scale byte (0xff) makes its tile NaN, as the reference's.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/device/f16_shifts.h"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/sm90a/seesaw/config.cuh"
#include "cuda/sm90a/seesaw/operands.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"
#include "cuda/sm90a/sparse_decode/config.cuh"

namespace sparse_mla::cuda::sm90a_decode {

__device__ __forceinline__ uint32_t f16x2_bits(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}

// ---- Q ---------------------------------------------------------------------------------------

// The consumers' barrier after Q's conversion (ids 1-5 are the seesaw's, 6-7 the scorers').
inline constexpr int kQConvertedBarrier = 8;

// Both consumer warpgroups, once Q landed (q_full) and before their first scores of the item:
// consumer thread t converts quarter t % 4 of row t / 4 (panels 2 (t % 4), +1; the RoPE panel is
// the last of quarter 3), then a barrier of the 256 (the registers of O are free here, between
// items; the producer runs in 72 and has none for it). sm.q_scale[row] = scale_log2 x 2^-kq: the
// row's score scale (seesaw/consumers.cuh, block_scale).
template <int kDqk>
__device__ __forceinline__ void convert_q_f16(Smem<kDqk>& sm, float scale_log2) {
  static_assert(kDqk == 512, "F16NopeOperands: seven f16 panels and the RoPE panel");
  const int t = static_cast<int>(threadIdx.x);
  const int row = t >> 2, first_panel = 2 * (t & 3);
  uint8_t* base = sm.q + row * 128;
  // The largest |q| of the row: bf16 magnitudes compare as integers (a NaN above inf).
  uint32_t largest = 0;
#pragma unroll
  for (int panel = 0; panel < 2; ++panel) {
#pragma unroll
    for (int chunk = 0; chunk < 8; ++chunk) {
      const uint4 v =
          *reinterpret_cast<const uint4*>(base + (first_panel + panel) * kPanelBytes + 16 * chunk);
      largest = __vmaxu2(largest, __vmaxu2(__vmaxu2(v.x, v.y), __vmaxu2(v.z, v.w)) & 0x7fff7fffu);
    }
  }
  largest = max(largest & 0xffffu, largest >> 16);
  largest = max(largest, static_cast<uint32_t>(__shfl_xor_sync(0xffffffffu, largest, 1)));
  largest = max(largest, static_cast<uint32_t>(__shfl_xor_sync(0xffffffffu, largest, 2)));
  const int kq = f16_q_row_shift(largest);
  const float up = __uint_as_float(static_cast<uint32_t>(127 + kq) << 23);
  if ((t & 3) == 0) {
    sm.q_scale[row] = scale_log2 * __uint_as_float(static_cast<uint32_t>(127 - kq) << 23);
  }
#pragma unroll
  for (int panel = 0; panel < 2; ++panel) {
    const bool rope = first_panel + panel >= F16NopeOperands::kF16Panels;
#pragma unroll
    for (int chunk = 0; chunk < 8; ++chunk) {
      uint4* at = reinterpret_cast<uint4*>(base + (first_panel + panel) * kPanelBytes + 16 * chunk);
      uint4 v = *at;
      uint32_t* w = &v.x;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float lo = __uint_as_float(w[i] << 16) * up;
        const float hi = __uint_as_float(w[i] & 0xffff0000u) * up;
        w[i] = rope ? ptx::pack_bf16x2(lo, hi) : f16x2_bits(__floats2half2_rn(lo, hi));
      }
      *at = v;
    }
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(kQConvertedBarrier, kConsumerThreads);
}

// ---- a block -----------------------------------------------------------------------------------

// A tile's scale byte under shift c as f16x2: 2^(E + c) (0 below f16's range), NaN for 0xff.
__device__ __forceinline__ uint32_t tile_scale_f16x2(uint32_t byte, int c) {
  const int biased = min(max(static_cast<int>(byte) + c, 0), 255);
  const float f = byte == 0xffu ? __uint_as_float(0x7fc00000u)
                                : __uint_as_float(static_cast<uint32_t>(biased) << 23);
  return f16x2_bits(__float2half2_rn(f));
}

// Unit u (16 e4m3 values) of row `row` times its tile's f16 scale into fp8 panel u / 4 of the
// half (the chunk placement of store_unit).
__device__ __forceinline__ void store_unit_f16(uint8_t* half_base, int row, int u, const uint4& raw,
                                               uint32_t scale) {
  const int chunk = 2 * (u & 3);
  uint8_t* row_base = half_base + (u >> 2) * kPanelBytes + row * 128;
  const __half2 s = *reinterpret_cast<const __half2*>(&scale);
  const auto pair = [s](uint32_t two) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
    return f16x2_bits(__hmul2(__half2(h), s));
  };
  *reinterpret_cast<uint4*>(row_base + ((chunk ^ (row & 7)) << 4)) = make_uint4(
      pair(raw.x & 0xffffu), pair(raw.x >> 16), pair(raw.y & 0xffffu), pair(raw.y >> 16));
  *reinterpret_cast<uint4*>(row_base + (((chunk + 1) ^ (row & 7)) << 4)) = make_uint4(
      pair(raw.z & 0xffffu), pair(raw.z >> 16), pair(raw.w & 0xffffu), pair(raw.w >> 16));
}

// convert_half (kernel.cuh) for F16NopeOperands: the same threads, units, phases and barriers.
// The first half the warpgroup converts of a block (kFirstScoreHalf) also finds the block's shift:
// producer-thread chunk c < 7 takes scale byte c of its four rows, each warp reduces, and after the
// first barrier every thread combines the four warps'; it writes sm.kv_scale[kStage] = 2^-c, from
// which the block's other half reads c.
template <class Traits, int kStage, int kHalf>
__device__ __forceinline__ void convert_half_f16(Smem<Traits::kDqk>& sm) {
  static_assert(Traits::kFormat == KvCacheFormat::kV4Fp8);
  constexpr int kPanels = kFp8Panels<Traits::kQuantDims, kHalf>;
  constexpr int kRawPitch = kPanels * 64;
  constexpr bool kFindsShift = kHalf == kFirstScoreHalf<kStage>;
  const int t = static_cast<int>(threadIdx.x) & (kProducerThreads - 1);
  const ProducerPlace at(t);
  constexpr int barrier = kConvertBarrier + kStage;
  uint8_t* half_base = sm.kv[kStage] + kHalf * kLeftPanels * kPanelBytes;
  const uint8_t* raw = half_base + kPanels * kPanelBytes / 2;
  const HalfUnits<kPanels> units(at.chunk);
  // The rows' scale bytes of the half's tiles (a row's eight bytes: seven tiles and a pad byte;
  // the half's are the first four or the next three).
  uint32_t row_scales[4];
  uint32_t largest = 0, smallest = 0xff;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint2 v = *reinterpret_cast<const uint2*>(half_base + 8 * (at.group + 16 * r));
    row_scales[r] = kHalf == 0 ? v.x : v.y;
    if constexpr (kFindsShift) {
      if (at.chunk < 7) {
        const uint32_t byte = ((at.chunk < 4 ? v.x : v.y) >> (8 * (at.chunk & 3))) & 0xffu;
        // Zero bytes (invalid rows, or a tile whose values are all below 2^-118) and NaN scales
        // do not constrain the shift.
        if (byte != 0 && byte != 0xff) {
          largest = max(largest, byte);
          smallest = min(smallest, byte);
        }
      }
    }
  }
  if constexpr (kFindsShift) {
    largest = __reduce_max_sync(0xffffffffu, largest);
    smallest = __reduce_min_sync(0xffffffffu, smallest);
    if ((t & 31) == 0) sm.exponent_range[kStage][t >> 5] = largest << 8 | smallest;
  }
  ptx::named_barrier_sync(barrier, kProducerThreads);
  int c;
  if constexpr (kFindsShift) {
    largest = 0;
    smallest = 0xff;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t range = sm.exponent_range[kStage][w];
      largest = max(largest, range >> 8);
      smallest = min(smallest, range & 0xffu);
    }
    c = f16_block_shift(largest, smallest);
    if (t == 0) sm.kv_scale[kStage] = __uint_as_float(static_cast<uint32_t>(127 - c) << 23);
  } else {
    c = 127 - static_cast<int>((__float_as_uint(sm.kv_scale[kStage]) >> 23) & 0xffu);
  }
  const auto unit_scale = [c](uint32_t scales, int u) {
    return tile_scale_f16x2((scales >> (8 * (u >> 2))) & 0xffu, c);
  };
  // Phase 1 and 2 as in convert_half: one row per turn of loops that are not unrolled.
  if (units.has_first) {
    const uint8_t* first = raw + at.group * kRawPitch + 16 * units.first;
    uint4 next = *reinterpret_cast<const uint4*>(first);
#pragma unroll 1
    for (int r = 0; r < 4; ++r) {
      const uint4 a = next;
      next = *reinterpret_cast<const uint4*>(first + 16 * kRawPitch * min(r + 1, 3));
      store_unit_f16(half_base, at.group + 16 * r, units.first, a,
                     unit_scale(row_scales[0], units.first));
      const uint32_t done = row_scales[0];
      row_scales[0] = row_scales[1];
      row_scales[1] = row_scales[2];
      row_scales[2] = row_scales[3];
      row_scales[3] = done;
    }
  }
  uint4 second[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    second[r] =
        *reinterpret_cast<const uint4*>(raw + (at.group + 16 * r) * kRawPitch + 16 * units.second);
  }
  ptx::named_barrier_sync(barrier, kProducerThreads);
#pragma unroll 1
  for (int r = 0; r < 4; ++r) {
    store_unit_f16(half_base, at.group + 16 * r, units.second, second[0],
                   unit_scale(row_scales[0], units.second));
    second[0] = second[1];
    second[1] = second[2];
    second[2] = second[3];
    row_scales[0] = row_scales[1];
    row_scales[1] = row_scales[2];
    row_scales[2] = row_scales[3];
  }
  if constexpr (kHalf == 1) {
    // The RoPE panel (bf16, as the producer copied it) times 2^c: the thread's chunk of its rows.
    if (c != 0) {
      const uint32_t factor = (static_cast<uint32_t>(127 + c) << 7) * 0x10001u;
      uint8_t* rope = sm.kv[kStage] + F16NopeOperands::kF16Panels * kPanelBytes;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        uint4* chunk =
            reinterpret_cast<uint4*>(rope + (at.group + 16 * r) * 128 + at.swizzled_chunk_bytes);
        uint4 v = *chunk;
        v.x = ptx::mul_bf16x2(v.x, factor);
        v.y = ptx::mul_bf16x2(v.y, factor);
        v.z = ptx::mul_bf16x2(v.z, factor);
        v.w = ptx::mul_bf16x2(v.w, factor);
        *chunk = v;
      }
    }
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(barrier, kProducerThreads);
}

}  // namespace sparse_mla::cuda::sm90a_decode
