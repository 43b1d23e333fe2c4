// Split-KV combine kernel and its launcher: a grid over (query, head, column slice) whose warps
// merge the partial results (combine_rows.cuh), launched as a programmatic dependent of the split
// kernel.
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>

#include "cuda/combine/combine_rows.cuh"
#include "cuda/combine/launch.h"
#include "cuda/knobs.h"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::cuda {
namespace {

using combine::combine_head_slice;
using combine::CombineArgs;
using combine::CombineTiling;
using combine::kDv;
using combine::kThreads;
using combine::kWarps;

// Grid (num_queries, Tiling::query_ctas(h_q)); the warps as CombineTiling says.
template <class Tiling, bool kVectorStore>
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
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The query's warp g = blockIdx.y * kWarps + warp, split as CombineTiling says; without piece
  // groups a CTA holds kWarps / kColumnSlices whole heads, with them a CTA is one (head, slice)
  // and its warps are the groups (so the exit below is all of a CTA or none of it).
  int head, slice, group;
  if constexpr (Tiling::kPieceGroups == 1) {
    head = blockIdx.y * (kWarps / Tiling::kColumnSlices) + warp / Tiling::kColumnSlices;
    slice = warp % Tiling::kColumnSlices;
    group = 0;
  } else {
    head = blockIdx.y / Tiling::kColumnSlices;
    slice = blockIdx.y % Tiling::kColumnSlices;
    group = warp;
  }
  if (head >= a.h_q) return;
  if constexpr (Tiling::kPieceGroups > 1) {
    __shared__ float4 group_sums[kWarps][32];
    combine_head_slice<Tiling, kVectorStore>(a, query, begin, num_splits, head, slice, group, lane,
                                             group_sums, [] { __syncthreads(); });
  } else {
    combine_head_slice<Tiling, kVectorStore>(a, query, begin, num_splits, head, slice, group, lane,
                                             nullptr, [] {});
  }
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

  const CombineArgs args =
      combine::combine_args(p, ws.split_offsets, ws.partial_lse, ws.partial_out);
  const bool vector_store = combine::out_rows_take_vector_stores(p);
  const int slices = column_slices_for(num_queries, p.problem.h_q);
  if (piece_groups_for(num_queries, num_parts, slices) == kWarps) {
    return launch_combine_grid<CombineTiling<4, kWarps>>(args, vector_store, num_queries, stream);
  }
  return slices == 4
             ? launch_combine_grid<CombineTiling<4, 1>>(args, vector_store, num_queries, stream)
             : launch_combine_grid<CombineTiling<1, 1>>(args, vector_store, num_queries, stream);
}

}  // namespace sparse_mla::cuda
