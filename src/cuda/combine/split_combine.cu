// Split-KV combine kernel and its launcher. kColumnSlices (1 or 4) column slices per (query, head),
// each summed by kPieceGroups (1 or 8) warps that share the query's pieces: every warp merges the
// query's log2-domain partial LSEs, the first writes the natural-log LSE (sink excluded, SPEC §2),
// and each sums its columns of the normalised partial outputs weighted by exp2(lse_i - lse), scaled
// once by the sink factor.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/combine/launch.h"
#include "cuda/knobs.h"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::cuda {
namespace {

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
//     grid has <= 64 CTAs, 1.01-1.05x from 96 CTAs up; hence column_slices_for() below.
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
  // Heads of one token: h_q, or over an index union (s_q 1, the request's tokens' heads as h_q)
  // the call's own, so that head r is head r % heads_per_token of token r / heads_per_token.
  int32_t heads_per_token;
};

__device__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}

__device__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// A lane owns output columns col0 + k*128 + [0, 4), k < kFloat4PerLane, with
// col0 = slice * kColsPerWarp + lane * 4: a warp's float4 loads cover 512 contiguous bytes.
template <bool kVectorStore, int kFloat4PerLane>
__device__ void store_row(uint16_t* row, int col0, const float (&acc)[kFloat4PerLane][4]) {
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

// Grid (num_queries, Tiling::query_ctas(h_q)); the warps as CombineTiling says.
template <class Tiling, bool kVectorStore>
__global__ void __launch_bounds__(kThreads) split_combine_kernel(CombineArgs a) {
  constexpr int kFloat4PerLane = Tiling::kFloat4PerLane;
  constexpr int kPiecesPerChunk = Tiling::kPiecesPerChunk;
  constexpr int kPieceGroups = Tiling::kPieceGroups;
  // split_offsets is the planner's (or an earlier call's), complete before the split kernel
  // started, so it is read before the wait below; a query processed whole leaves at once.
  const int64_t query = blockIdx.x;
  const int32_t begin = a.split_offsets[query];
  const int32_t num_splits = a.split_offsets[query + 1] - begin;
  if (num_splits == 0) return;  // processed whole: the split kernel wrote out and lse
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent of the split kernel (sm_90+): wait until its partial
  // results are complete and visible. A no-op for an ordinary launch.
  cudaGridDependencySynchronize();
#endif
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The query's warp g = blockIdx.y * kWarps + warp, split as CombineTiling says; without piece
  // groups a CTA holds kWarps / kColumnSlices whole heads, with them a CTA is one (head, slice)
  // and its warps are the groups (so the exit below is all of a CTA or none of it).
  int head, slice, group;
  if constexpr (kPieceGroups == 1) {
    head = blockIdx.y * (kWarps / Tiling::kColumnSlices) + warp / Tiling::kColumnSlices;
    slice = warp % Tiling::kColumnSlices;
    group = 0;
  } else {
    head = blockIdx.y / Tiling::kColumnSlices;
    slice = blockIdx.y % Tiling::kColumnSlices;
    group = warp;
  }
  if (head >= a.h_q) return;
  const int col0 = slice * Tiling::kColsPerWarp + lane * 4;

  const int token = head / a.heads_per_token;  // 0 but over an index union
  const int token_head = head - token * a.heads_per_token;
  const int64_t b_idx = query / a.s_q, s_idx = query % a.s_q + token;
  uint16_t* out_row =
      a.out + b_idx * a.out_stride_b + s_idx * a.out_stride_s + token_head * a.out_stride_h;
  float* lse_out =
      a.lse + b_idx * a.lse_stride_b + s_idx * a.lse_stride_s + token_head * a.lse_stride_h;
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
        1.0f / (1.0f + exp2f(a.attn_sink[token_head * a.attn_sink_stride] * kLog2e - global_lse));
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
    __shared__ float4 group_sums[kWarps][32];
    group_sums[warp][lane] = make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
    __syncthreads();
    if (warp != 0) return;
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

// Four column slices when the <1, 1> grid has at most kSmallGridCtas CTAs. On the H200 (132
// SMs) slices measured 0.91-0.99x at <= 64 one-slice CTAs (V4 b=1 and b=12 up to 32 heads,
// b=2 s_q=2 at 64 and 128 heads) and 1.01-1.05x from 96 up (exp-combine-column-slices-2026-11-30).
// SMLA_COMBINE_COLUMN_SLICES=1 or 4 forces the choice (tests run both; A/B runs).
constexpr int64_t kSmallGridCtas = 64;

int column_slices_for(int64_t num_queries, int64_t h_q) {
  if (const std::optional<int> forced = cuda_knobs().combine_column_slices.value) return *forced;
  const int64_t one_slice_ctas = num_queries * CombineTiling<1, 1>::query_ctas(h_q);
  return one_slice_ctas <= kSmallGridCtas ? 4 : 1;
}

// Eight piece groups on top of four column slices where a query averages more than two chunks of
// pieces per warp: with `num_parts` parts over `num_queries` queries a query has about
// num_parts / num_queries + 1 pieces, whose rows a <4, 1> warp loads one chunk of 8 after the
// other, each chunk a DRAM round trip. On an H100 the groups took V3.2 h16 b=1 (64 one-block
// pieces) from 19.9 to 13.8 us and V4 b=1 at 8 / 16 / 32 / 64 heads to 0.89 / 0.90 / 0.98 / 1.00x
// (benchmarks/results/combine-piece-groups-h100-2026-12-07/). SMLA_COMBINE_PIECE_GROUPS=1 or 8
// forces the choice (8 with four column slices, whatever SMLA_COMBINE_COLUMN_SLICES says).
constexpr int64_t kPieceGroupChunks = 2;

int piece_groups_for(int64_t num_queries, int64_t num_parts, int column_slices) {
  if (const std::optional<int> forced = cuda_knobs().combine_piece_groups.value) return *forced;
  constexpr int64_t kChunk = CombineTiling<4, 1>::kPiecesPerChunk;
  return column_slices == 4 && num_parts >= kPieceGroupChunks * kChunk * num_queries ? kWarps : 1;
}

// Programmatic dependent launch: the combine's launch overlaps the split kernel's tail instead of
// waiting for it to drain (FlashMLA does the same); the kernel's cudaGridDependencySynchronize()
// keeps the data dependency. That wait exists only in code compiled for sm_90+, so the attribute
// follows the PTX the loaded kernel came from, not the device: a newer GPU that JIT-compiles the
// compute_80 PTX gets a plain launch.
template <class Tiling>
Status launch_combine_grid(const CombineArgs& args, bool vector_store, int64_t num_queries,
                           cudaStream_t stream) {
  auto* kernel =
      vector_store ? split_combine_kernel<Tiling, true> : split_combine_kernel<Tiling, false>;
  int ptx_version = 0;  // asked once per (kernel, device)
  SMLA_CUDA_RETURN_IF_ERROR(kernel_ptx_version(kernel, &ptx_version));
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim =
      dim3(static_cast<unsigned>(num_queries), static_cast<unsigned>(Tiling::query_ctas(args.h_q)));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = ptx_version >= 90 ? 1 : 0;
  SMLA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, args));
  return check_last_launch("split_combine_kernel");
}

}  // namespace

Status launch_split_combine(const detail::DecodeParams& p, int num_parts, const void* workspace,
                            cudaStream_t stream, int heads_per_token) {
  const int64_t num_queries = p.problem.b * p.problem.s_q;
  if (num_queries == 0) return {};
  if (p.problem.d_v != kDv) {
    return {StatusCode::kInternal,
            "launch_split_combine: d_v = " + std::to_string(p.problem.d_v) + " is not 512"};
  }
  if (workspace == nullptr) return {StatusCode::kInternal, "launch_split_combine: no workspace"};
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(num_queries, num_parts, p.problem.h_q, p.problem.d_v);
  const planning::DecodeWorkspace ws =
      planning::carve_decode_workspace(const_cast<void*>(workspace), layout);

  CombineArgs args;
  args.split_offsets = ws.split_offsets;
  args.partial_lse = ws.partial_lse;
  args.partial_out = ws.partial_out;
  args.attn_sink = p.attn_sink;
  args.attn_sink_stride = p.attn_sink_stride;
  args.out = p.out;
  args.out_stride_b = p.out_stride_b;
  args.out_stride_s = p.out_stride_s;
  args.out_stride_h = p.out_stride_h;
  args.lse = p.lse;
  args.lse_stride_b = p.lse_stride_b;
  args.lse_stride_s = p.lse_stride_s;
  args.lse_stride_h = p.lse_stride_h;
  args.s_q = p.problem.s_q;
  args.h_q = static_cast<int32_t>(p.problem.h_q);
  args.heads_per_token = heads_per_token > 0 ? heads_per_token : args.h_q;

  // 8-byte stores need every row start 8-byte aligned: pointer and strides in multiples of 4.
  const bool vector_store = reinterpret_cast<uintptr_t>(p.out) % 8 == 0 &&
                            p.out_stride_b % 4 == 0 && p.out_stride_s % 4 == 0 &&
                            p.out_stride_h % 4 == 0;
  const int slices = column_slices_for(num_queries, p.problem.h_q);
  if (piece_groups_for(num_queries, num_parts, slices) == kWarps) {
    return launch_combine_grid<CombineTiling<4, kWarps>>(args, vector_store, num_queries, stream);
  }
  return slices == 4
             ? launch_combine_grid<CombineTiling<4, 1>>(args, vector_store, num_queries, stream)
             : launch_combine_grid<CombineTiling<1, 1>>(args, vector_store, num_queries, stream);
}

}  // namespace sparse_mla::cuda
