// The split-KV merge of one (query, head, column slice), shared by the combine kernel
// (split_combine.cu) and the warp-specialised split kernel's merge CTAs
// (warp_specialized_kernel.cuh merge_partials). Every warp of a slice
// merges the query's log2-domain partial LSEs, the first writes the natural-log LSE (sink
// excluded, SPEC §2), and each sums its columns of the normalised partial outputs weighted by
// exp2(lse_i - lse), scaled once by the sink factor.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/params.h"

namespace sparse_mla::cuda::combine {

constexpr int kDv = 512;  // SPEC: d_v is 512 for every model
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

// How the warps of a query's CTAs cover (head, columns, pieces). Warp w of CTA (query, y) is the
// query's warp g = y * kWarps + w, which sums pieces group g % kPieceGroups of column slice
// (g / kPieceGroups) % kColumnSlices of head g / (kColumnSlices * kPieceGroups).
//   <1, 1>: one warp per head over all 512 columns (a lane: 4 float4 per piece), 8 heads per CTA:
//     h_q = 8..128 fills 1..16 CTAs per query. 126 registers.
//   <4, 1>: 4 warps per head, 128 columns each (a lane: one float4 per piece), 2 heads per CTA:
//     4x the CTAs, for calls whose <1, 1> grid leaves most SMs idle (V4 b=1 with 16 heads: 2 CTAs,
//     each warp walking ~20 pieces of 2 KB rows). The 4 warps of a head repeat the LSE reductions
//     (4 B per piece). 64 registers. Measured on the H200 for every call
//     (benchmarks/results/exp-combine-column-slices-2026-11-30/): 0.91-0.99x where the <1, 1>
//     grid has <= 64 CTAs, 1.01-1.05x from 96 CTAs up; hence split_combine.cu's
//     column_slices_for().
//   <4, 8>: a CTA per (head, column slice) whose 8 warps take every 8th chunk of the pieces and
//     add their sums in warp order through shared memory: a query of 64 pieces (V3.2 at 16 heads
//     and b = 1 splits its 64 blocks of 32 keys into one-block pieces) is one round of row loads
//     per warp instead of eight in series.
// kPiecesPerChunk: pieces whose partial rows a warp loads together, before it needs their weights.
// The first chunk's loads are issued ahead of the LSE reductions, so a query's row reads and its
// LSE reads are one DRAM round trip instead of two or three in series (16-row decode tiles split a
// query into ~4 pieces at b = 64-128, ~20 at b = 1): 4 x 4 float4 registers per lane with one
// slice, 8 x 1 with four.
template <int kColumnSlicesValue, int kPieceGroupsValue>
struct CombineTiling {
  static constexpr int kColumnSlices = kColumnSlicesValue;
  static constexpr int kPieceGroups = kPieceGroupsValue;
  static constexpr int kColsPerWarp = kDv / kColumnSlices;
  static constexpr int kFloat4PerLane = kColsPerWarp / (32 * 4);
  static constexpr int kWarpsPerHead = kColumnSlices * kPieceGroups;
  static constexpr int kPiecesPerChunk = kColumnSlices == 1 ? 4 : 8;
  static_assert(kColumnSlices == 1 || kColumnSlices == 4);
  static_assert(kPieceGroups == 1 || kPieceGroups == kWarps);
  // The grid's y extent: CTAs per query.
  static constexpr int64_t query_ctas(int64_t h_q) {
    return (h_q * kWarpsPerHead + kWarps - 1) / kWarps;
  }
};
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct CombineArgs {
  const int32_t* split_offsets;  // [num_queries + 1]
  const float* partial_lse;      // [max_partials, h_q] log2 domain
  const float* partial_out;      // [max_partials, h_q, kDv] fp32
  const float* attn_sink;        // [h_q] or nullptr
  int64_t attn_sink_stride;
  uint16_t* out;  // [b, s_q, h_q, kDv] bf16 bits
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;  // [b, s_q, h_q] fp32, natural log
  int64_t lse_stride_b, lse_stride_s, lse_stride_h;
  int64_t s_q;
  int32_t h_q;
};

// The merge's arguments: the call's sink and outputs, and the workspace's split offsets and
// partial results (planning/decode_workspace.h).
__host__ __device__ inline CombineArgs combine_args(const detail::DecodeParams& p,
                                                    const int32_t* split_offsets,
                                                    const float* partial_lse,
                                                    const float* partial_out) {
  CombineArgs a;
  a.split_offsets = split_offsets;
  a.partial_lse = partial_lse;
  a.partial_out = partial_out;
  a.attn_sink = p.attn_sink;
  a.attn_sink_stride = p.attn_sink_stride;
  a.out = p.out;
  a.out_stride_b = p.out_stride_b;
  a.out_stride_s = p.out_stride_s;
  a.out_stride_h = p.out_stride_h;
  a.lse = p.lse;
  a.lse_stride_b = p.lse_stride_b;
  a.lse_stride_s = p.lse_stride_s;
  a.lse_stride_h = p.lse_stride_h;
  a.s_q = p.problem.s_q;
  a.h_q = static_cast<int32_t>(p.problem.h_q);
  return a;
}

// 8-byte stores of out need every row start 8-byte aligned: pointer and strides in multiples of 4.
__host__ __device__ inline bool out_rows_take_vector_stores(const detail::DecodeParams& p) {
  return reinterpret_cast<uintptr_t>(p.out) % 8 == 0 && p.out_stride_b % 4 == 0 &&
         p.out_stride_s % 4 == 0 && p.out_stride_h % 4 == 0;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// A lane owns output columns col0 + k*128 + [0, 4), k < kFloat4PerLane, with
// col0 = slice * kColsPerWarp + lane * 4: a warp's float4 loads cover 512 contiguous bytes.
template <bool kVectorStore, int kFloat4PerLane>
__device__ __forceinline__ void store_row(uint16_t* row, int col0,
                                          const float (&acc)[kFloat4PerLane][4]) {
#pragma unroll
  for (int k = 0; k < kFloat4PerLane; ++k) {
    const int col = col0 + k * 128;
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc[k][0], acc[k][1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc[k][2], acc[k][3]);
    if constexpr (kVectorStore) {
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(row + col) = packed;
    } else {
      const __nv_bfloat16 values[4] = {lo.x, lo.y, hi.x, hi.y};
#pragma unroll
      for (int j = 0; j < 4; ++j) row[col + j] = *reinterpret_cast<const uint16_t*>(&values[j]);
    }
  }
}

// The merge of one (query, head, column slice): warp `group` of the slice's kPieceGroups warps
// sums pieces group, group + kPieceGroups, ... (in chunks) of the query's `num_splits` partial
// results from slot `begin`; with piece groups the groups' sums meet in `group_sums` (shared
// memory, [kWarps][32]) after `sync_groups()`, a barrier over exactly the slice's warps, and group
// 0 stores. Without piece groups `group` is 0 and neither is used.
template <class Tiling, bool kVectorStore, class SyncGroups>
__device__ __forceinline__ void combine_head_slice(const CombineArgs& a, int64_t query,
                                                   int32_t begin, int32_t num_splits, int head,
                                                   int slice, int group, int lane,
                                                   float4 (*group_sums)[32],
                                                   SyncGroups&& sync_groups) {
  constexpr int kFloat4PerLane = Tiling::kFloat4PerLane;
  constexpr int kPiecesPerChunk = Tiling::kPiecesPerChunk;
  constexpr int kPieceGroups = Tiling::kPieceGroups;
  const int col0 = slice * Tiling::kColsPerWarp + lane * 4;

  const int64_t b_idx = query / a.s_q, s_idx = query % a.s_q;
  uint16_t* out_row =
      a.out + b_idx * a.out_stride_b + s_idx * a.out_stride_s + head * a.out_stride_h;
  float* lse_out = a.lse + b_idx * a.lse_stride_b + s_idx * a.lse_stride_s + head * a.lse_stride_h;
  const float* lse_of_split = a.partial_lse + static_cast<int64_t>(begin) * a.h_q + head;

  const float* out_of_split =
      a.partial_out + (static_cast<int64_t>(begin) * a.h_q + head) * kDv + col0;
  // Rows of pieces [first, first + kPiecesPerChunk) that exist. An empty piece's row (lse -inf)
  // is loaded but never used: its bytes may be anything, NaN included.
  auto load_chunk = [&](int first, float4(&rows)[kPiecesPerChunk][kFloat4PerLane]) {
#pragma unroll
    for (int j = 0; j < kPiecesPerChunk; ++j) {
      if (first + j >= num_splits) break;
      const float* row = out_of_split + static_cast<int64_t>(first + j) * a.h_q * kDv;
#pragma unroll
      for (int k = 0; k < kFloat4PerLane; ++k) {
        rows[j][k] = *reinterpret_cast<const float4*>(row + k * 128);
      }
    }
  };
  // This warp's chunks: group, group + kPieceGroups, ... (in units of kPiecesPerChunk pieces).
  constexpr int kStride = kPieceGroups * kPiecesPerChunk;
  const int first_piece = group * kPiecesPerChunk;
  float4 rows[kPiecesPerChunk][kFloat4PerLane];
  load_chunk(first_piece, rows);  // independent of the LSEs: in flight during the reductions below

  float max_lse = -INFINITY;
  for (int i = lane; i < num_splits; i += 32) max_lse = fmaxf(max_lse, lse_of_split[i * a.h_q]);
  max_lse = warp_max(max_lse);
  float acc[kFloat4PerLane][4] = {};
  // max_lse is the query's and head's, the same in every warp of a CTA with piece groups.
  if (max_lse == -INFINITY) {  // no valid slot in any piece: out 0, lse +inf, sink ignored
    if (group == 0) store_row<kVectorStore>(out_row, col0, acc);
    if (lane == 0 && slice == 0 && group == 0) *lse_out = INFINITY;
    return;
  }
  float sum = 0.0f;
  for (int i = lane; i < num_splits; i += 32) sum += exp2f(lse_of_split[i * a.h_q] - max_lse);
  const float global_lse = max_lse + log2f(warp_sum(sum));  // log2 domain, sink excluded

  // The sink is one more logit with a zero value: out *= 1 / (1 + exp2(sink*log2e - lse)).
  // sink -inf: factor 1; +inf (or far above lse): factor 0.
  float sink_factor = 1.0f;
  if (a.attn_sink != nullptr) {
    sink_factor =
        1.0f / (1.0f + exp2f(a.attn_sink[head * a.attn_sink_stride] * kLog2e - global_lse));
  }

  // This warp's pieces in order; with piece groups the groups' sums are then added in group
  // order (the sum's rounding depends on the tiling, not on the data or the launch).
  for (int first = first_piece;;) {  // a chunk past the last piece adds nothing
#pragma unroll
    for (int j = 0; j < kPiecesPerChunk; ++j) {
      const int i = first + j;
      if (i >= num_splits) break;
      const float split_lse = lse_of_split[i * a.h_q];
      if (split_lse == -INFINITY) continue;  // an empty piece: weight 0, its row not used
      const float weight = exp2f(split_lse - global_lse) * sink_factor;
#pragma unroll
      for (int k = 0; k < kFloat4PerLane; ++k) {
        acc[k][0] += weight * rows[j][k].x;
        acc[k][1] += weight * rows[j][k].y;
        acc[k][2] += weight * rows[j][k].z;
        acc[k][3] += weight * rows[j][k].w;
      }
    }
    first += kStride;
    if (first >= num_splits) break;
    load_chunk(first, rows);
  }
  if constexpr (kPieceGroups > 1) {
    static_assert(kFloat4PerLane == 1 && kPieceGroups == kWarps);
    group_sums[group][lane] = make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
    sync_groups();
    if (group != 0) return;
#pragma unroll
    for (int g = 1; g < kWarps; ++g) {
      const float4 v = group_sums[g][lane];
      acc[0][0] += v.x;
      acc[0][1] += v.y;
      acc[0][2] += v.z;
      acc[0][3] += v.w;
    }
  }
  store_row<kVectorStore>(out_row, col0, acc);
  if (lane == 0 && slice == 0) *lse_out = global_lse * kLn2;
}

}  // namespace sparse_mla::cuda::combine
