// Split-KV combine kernel and its launcher. kColumnSlices (1 or 4) warps per (query, head), each
// over kDv / kColumnSlices output columns: every warp merges the query's log2-domain partial LSEs,
// the first writes the natural-log LSE (sink excluded, SPEC §2), and each sums its columns of the
// normalised partial outputs weighted by exp2(lse_i - lse), scaled once by the sink factor.
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

constexpr int kDv = 512;       // SPEC: d_v is 512 for every model
constexpr int kThreads = 256;  // 8 warps

// How a CTA's 8 warps cover (query, head, columns).
//   kColumnSlices 1: one warp per head over all 512 columns (a lane: 4 float4 per piece), 8 heads
//     per CTA: h_q = 8..128 fills 1..16 CTAs per query. 126 registers.
//   kColumnSlices 4: 4 warps per head, 128 columns each (a lane: one float4 per piece), 2 heads
//     per CTA: 4x the CTAs, for calls whose 1-slice grid leaves most SMs idle (V4 b=1 with 16
//     heads: 2 CTAs, each warp walking ~20 pieces of 2 KB rows). The 4 warps of a head repeat the
//     LSE reductions (4 B per piece). 64 registers. Measured on the H200 for every call
//     (benchmarks/results/exp-combine-column-slices-2026-11-30/): 0.91-0.99x where the 1-slice
//     grid has <= 64 CTAs, 1.01-1.05x from 96 CTAs up; hence column_slices_for() below.
// kPiecesPerChunk: pieces whose partial rows a warp loads together, before it needs their weights.
// The first chunk's loads are issued ahead of the LSE reductions, so a query's row reads and its
// LSE reads are one DRAM round trip instead of two or three in series (16-row decode tiles split a
// query into ~4 pieces at b = 64-128, ~20 at b = 1): 4 x 4 float4 registers per lane with one
// slice, 8 x 1 with four.
template <int kColumnSlicesValue>
struct CombineTiling {
  static constexpr int kColumnSlices = kColumnSlicesValue;
  static constexpr int kColsPerWarp = kDv / kColumnSlices;
  static constexpr int kFloat4PerLane = kColsPerWarp / (32 * 4);
  static constexpr int kHeadsPerCta = kThreads / 32 / kColumnSlices;
  static constexpr int kPiecesPerChunk = kColumnSlices == 1 ? 4 : 8;
  static_assert(kColumnSlices == 1 || kColumnSlices == 4);
  // The grid's y extent: CTAs per query, ceil(h_q / kHeadsPerCta).
  static constexpr int64_t head_ctas(int64_t h_q) {
    return (h_q + kHeadsPerCta - 1) / kHeadsPerCta;
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

// Grid (num_queries, ceil(h_q / kHeadsPerCta)); warp w of CTA (q, y) combines column slice
// w % kColumnSlices of head y * kHeadsPerCta + w / kColumnSlices.
template <class Tiling, bool kVectorStore>
__global__ void __launch_bounds__(kThreads) split_combine_kernel(CombineArgs a) {
  constexpr int kFloat4PerLane = Tiling::kFloat4PerLane;
  constexpr int kPiecesPerChunk = Tiling::kPiecesPerChunk;
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
  const int head = blockIdx.y * Tiling::kHeadsPerCta + warp / Tiling::kColumnSlices;
  if (head >= a.h_q) return;
  const int slice = warp % Tiling::kColumnSlices;
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
  float4 rows[kPiecesPerChunk][kFloat4PerLane];
  load_chunk(0, rows);  // independent of the LSEs: in flight during the reductions below

  float max_lse = -INFINITY;
  for (int i = lane; i < num_splits; i += 32) max_lse = fmaxf(max_lse, lse_of_split[i * a.h_q]);
  max_lse = warp_max(max_lse);
  float acc[kFloat4PerLane][4] = {};
  if (max_lse == -INFINITY) {  // no valid slot in any piece: out 0, lse +inf, sink ignored
    store_row<kVectorStore>(out_row, col0, acc);
    if (lane == 0 && slice == 0) *lse_out = INFINITY;
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

  // Pieces in order (the sum's rounding does not depend on the chunking).
  for (int first = 0;;) {
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
    first += kPiecesPerChunk;
    if (first >= num_splits) break;
    load_chunk(first, rows);
  }
  store_row<kVectorStore>(out_row, col0, acc);
  if (lane == 0 && slice == 0) *lse_out = global_lse * kLn2;
}

// Four column slices when the one-slice grid has at most kSmallGridCtas CTAs. On the H200 (132
// SMs) slices measured 0.91-0.99x at <= 64 one-slice CTAs (V4 b=1 and b=12 up to 32 heads,
// b=2 s_q=2 at 64 and 128 heads) and 1.01-1.05x from 96 up (exp-combine-column-slices-2026-11-30).
// SMLA_COMBINE_COLUMN_SLICES=1 or 4 forces the choice (tests run both; A/B runs).
constexpr int64_t kSmallGridCtas = 64;

int column_slices_for(int64_t num_queries, int64_t h_q) {
  if (const std::optional<int> forced = cuda_knobs().combine_column_slices.value) return *forced;
  const int64_t one_slice_ctas = num_queries * CombineTiling<1>::head_ctas(h_q);
  return one_slice_ctas <= kSmallGridCtas ? 4 : 1;
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
      dim3(static_cast<unsigned>(num_queries), static_cast<unsigned>(Tiling::head_ctas(args.h_q)));
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
                            cudaStream_t stream) {
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

  // 8-byte stores need every row start 8-byte aligned: pointer and strides in multiples of 4.
  const bool vector_store = reinterpret_cast<uintptr_t>(p.out) % 8 == 0 &&
                            p.out_stride_b % 4 == 0 && p.out_stride_s % 4 == 0 &&
                            p.out_stride_h % 4 == 0;
  return column_slices_for(num_queries, p.problem.h_q) == 4
             ? launch_combine_grid<CombineTiling<4>>(args, vector_store, num_queries, stream)
             : launch_combine_grid<CombineTiling<1>>(args, vector_store, num_queries, stream);
}

}  // namespace sparse_mla::cuda
