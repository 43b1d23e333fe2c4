// Split-KV combine kernel and its launcher. One warp per (query, head): it merges the query's
// log2-domain partial LSEs, writes the natural-log LSE (sink excluded, SPEC §2), and sums the
// normalised partial outputs weighted by exp2(lse_i - lse), scaled once by the sink factor.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/combine/launch.h"
#include "cuda/runtime/cuda_check.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::cuda {
namespace {

constexpr int kDv = 512;  // SPEC: d_v is 512 for every model
// 8 warps = 8 heads per CTA: h_q = 8..128 fills 1..16 CTAs per query, and a lane holds 16 fp32
// accumulators (kDv / 32), so the CTA stays small enough for many per SM.
constexpr int kHeadsPerCta = 8;
constexpr int kThreads = kHeadsPerCta * 32;
constexpr int kFloat4PerLane = kDv / (32 * 4);
// Pieces whose partial rows a warp loads together, before it needs their weights: the first
// chunk's loads are issued ahead of the LSE reductions, so the query's row reads and its LSE reads
// are one DRAM round trip instead of two or three in series (16-row decode tiles split a query
// into ~4 pieces at b = 64-128, V3.2 and V4). 4 x 16 fp32 registers per lane.
constexpr int kPiecesPerChunk = 4;
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

// Lane `lane` owns output columns lane*4 + k*128 + [0, 4), k < kFloat4PerLane: float4 loads of a
// warp cover 512 contiguous bytes.
template <bool kVectorStore>
__device__ void store_row(uint16_t* row, int lane, const float (&acc)[kFloat4PerLane][4]) {
#pragma unroll
  for (int k = 0; k < kFloat4PerLane; ++k) {
    const int col = lane * 4 + k * 128;
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

// Grid (num_queries, ceil(h_q / kHeadsPerCta)); warp w of CTA (q, y) combines head y*8 + w.
template <bool kVectorStore>
__global__ void __launch_bounds__(kThreads) split_combine_kernel(CombineArgs a) {
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
  const int lane = threadIdx.x % 32;
  const int head = blockIdx.y * kHeadsPerCta + threadIdx.x / 32;
  if (head >= a.h_q) return;

  const int64_t b_idx = query / a.s_q, s_idx = query % a.s_q;
  uint16_t* out_row =
      a.out + b_idx * a.out_stride_b + s_idx * a.out_stride_s + head * a.out_stride_h;
  float* lse_out = a.lse + b_idx * a.lse_stride_b + s_idx * a.lse_stride_s + head * a.lse_stride_h;
  const float* lse_of_split = a.partial_lse + static_cast<int64_t>(begin) * a.h_q + head;

  const float* out_of_split =
      a.partial_out + (static_cast<int64_t>(begin) * a.h_q + head) * kDv + lane * 4;
  // Rows of pieces [first, first + kPiecesPerChunk) that exist. An empty piece's row (lse -inf)
  // is loaded but never used: its bytes may be anything, NaN included.
  auto load_chunk = [&](int first, float4 (&rows)[kPiecesPerChunk][kFloat4PerLane]) {
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
    store_row<kVectorStore>(out_row, lane, acc);
    if (lane == 0) *lse_out = INFINITY;
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
  store_row<kVectorStore>(out_row, lane, acc);
  if (lane == 0) *lse_out = global_lse * kLn2;
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
  // Programmatic dependent launch: the combine's launch overlaps the split kernel's tail instead
  // of waiting for it to drain (FlashMLA does the same); the kernel's
  // cudaGridDependencySynchronize() keeps the data dependency. That wait exists only in code
  // compiled for sm_90+, so the attribute follows the PTX the loaded kernel came from, not the
  // device: a newer GPU that JIT-compiles the compute_80 PTX gets a plain launch.
  auto* kernel = vector_store ? split_combine_kernel<true> : split_combine_kernel<false>;
  cudaFuncAttributes kernel_attributes;
  SMLA_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&kernel_attributes, kernel));
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(num_queries),
                        static_cast<unsigned>((p.problem.h_q + kHeadsPerCta - 1) / kHeadsPerCta));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = kernel_attributes.ptxVersion >= 90 ? 1 : 0;
  SMLA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, args));
  return check_last_launch("split_combine_kernel");
}

}  // namespace sparse_mla::cuda
