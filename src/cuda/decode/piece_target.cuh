// Where a finished piece of a decode split kernel goes, and the row stores every MMA core shares
// (the portable mma_core.cuh and register_q_core.cuh, the Hopper decode's store): an unsplit query
// writes bf16 `out` with the sink and the natural-log lse; a split piece writes the fp32 partial
// output and log2 lse the combine reads.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/params.h"
#include "cuda/decode/launch.h"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/mma.cuh"

namespace sparse_mla::cuda::decode {

// Where a finished piece goes. slot < 0: the query is processed whole here: out [b, s_q, h_q, 512]
// bf16 with the sink, lse natural log (+inf, out 0 without a valid slot). slot >= 0:
// partial_out [slot, h_q, 512] fp32 normalised by the piece's sum, partial_lse [slot, h_q] log2
// domain (-inf when empty).
struct PieceTarget {
  const DecodeLaunch* launch;
  int64_t b, s;
  int32_t slot;
  int head0;
};

// Per row: the factor its accumulated O is multiplied by, after writing the row's lse.
__device__ __forceinline__ float finish_row(const PieceTarget& to, int head, float m, float l,
                                            bool write_lse) {
  const detail::DecodeParams& p = to.launch->p;
  const bool empty = !(l > 0.0f);
  if (to.slot < 0) {
    if (write_lse) {
      p.lse[to.b * p.lse_stride_b + to.s * p.lse_stride_s + head * p.lse_stride_h] =
          empty ? INFINITY : (m + log2f(l)) * kLn2;
    }
    const float* sink = p.attn_sink != nullptr ? p.attn_sink + head * p.attn_sink_stride : nullptr;
    return empty ? 0.0f : output_scale(m, l, sink);
  }
  if (write_lse) {
    to.launch->partial_lse[static_cast<int64_t>(to.slot) * p.problem.h_q + head] =
        empty ? -INFINITY : m + log2f(l);
  }
  return empty ? 0.0f : 1.0f / l;
}

// Columns col .. col + 8 * kTiles (step 8, two per lane: o[n][i0], o[n][i0 + 1]) of one row.
template <int kTiles>
__device__ __forceinline__ void store_row(const PieceTarget& to, int head, int col,
                                          const float (&o)[kTiles][4], int i0, float scale) {
  const detail::DecodeParams& p = to.launch->p;
  if (to.slot < 0) {
    uint16_t* out_row =
        p.out + to.b * p.out_stride_b + to.s * p.out_stride_s + head * p.out_stride_h + col;
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      *reinterpret_cast<uint32_t*>(out_row + 8 * n) =
          ptx::pack_bf16x2(o[n][i0] * scale, o[n][i0 + 1] * scale);
    }
  } else {
    float* out_row =
        to.launch->partial_out + (static_cast<int64_t>(to.slot) * p.problem.h_q + head) * 512 + col;
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      *reinterpret_cast<float2*>(out_row + 8 * n) =
          make_float2(o[n][i0] * scale, o[n][i0 + 1] * scale);
    }
  }
}

}  // namespace sparse_mla::cuda::decode
