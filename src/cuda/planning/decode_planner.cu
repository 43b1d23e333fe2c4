// The device decode planner: one CTA computes the split schedule of decode_schedule_builder.h
// with two CTA-wide prefix sums per chunk of queries (cost line position, then partial slots),
// so its time grows with num_queries / kPlannerThreads rather than with num_queries.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda/device/block_scan.cuh"
#include "cuda/planning/launch.h"
#include "cuda/runtime/cuda_check.h"
#include "planning/decode_schedule_builder.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::cuda {
namespace {

using planning::DecodePartSchedule;

// 1024 threads: a decode step has up to a few thousand queries (b <= ~321, s_q <= 8), so the
// chunk loop runs at most a handful of times; one CTA keeps the planner a single small launch.
constexpr int kPlannerThreads = 1024;
constexpr int kWarps = kPlannerThreads / 32;

struct PlannerArgs {
  detail::IndexListParams list;
  detail::IndexListParams extra_list;  // topk 0 without an extra cache
  int64_t s_q;
  int32_t num_queries;
  int32_t num_parts;
  int64_t min_units;  // decode_schedule_builder.h's floor of units per part (0 = none)
  int32_t block_tokens;
  DecodePartSchedule* parts;  // [num_parts]
  int32_t* split_offsets;     // [num_queries + 1]
};

__device__ int32_t blocks_of(const PlannerArgs& a, int32_t query) {
  int64_t b_idx = query / a.s_q, s_idx = query % a.s_q;
  int64_t n_extra = a.extra_list.topk > 0 ? detail::effective_topk(a.extra_list, b_idx, s_idx) : 0;
  return planning::query_blocks(detail::effective_topk(a.list, b_idx, s_idx), n_extra,
                                a.block_tokens);
}

__global__ void __launch_bounds__(kPlannerThreads) decode_planner_kernel(PlannerArgs a) {
  __shared__ int64_t cost_sums[kWarps];
  __shared__ int32_t split_sums[kWarps];

  for (int32_t p = threadIdx.x; p < a.num_parts; p += kPlannerThreads) {
    a.parts[p] = planning::empty_part();
  }
  int64_t cost = 0;
  for (int32_t q = threadIdx.x; q < a.num_queries; q += kPlannerThreads) {
    cost += planning::query_cost(blocks_of(a, q));
  }
  int64_t total_cost;
  block_exclusive_scan<kPlannerThreads>(cost, &total_cost,
                                        cost_sums);  // also orders the empty_part() stores
  const int64_t units = planning::units_per_part(total_cost, a.num_parts, a.min_units);

  if (threadIdx.x == 0) a.split_offsets[0] = 0;
  int64_t cost_carry = 0;
  int32_t split_carry = 0;
  for (int32_t base = 0; base < a.num_queries; base += kPlannerThreads) {
    const int32_t q = base + threadIdx.x;
    const bool active = q < a.num_queries;
    const int32_t blocks = active ? blocks_of(a, q) : 0;
    int64_t chunk_cost;
    const int64_t cost_begin = cost_carry + block_exclusive_scan<kPlannerThreads>(
                                                active ? planning::query_cost(blocks) : int64_t{0},
                                                &chunk_cost, cost_sums);
    const planning::QueryPieces pieces = planning::query_pieces(cost_begin, blocks, units);
    const int32_t split_count = active ? pieces.split_count() : 0;
    int32_t chunk_splits;
    const int32_t split_offset =
        split_carry + block_exclusive_scan<kPlannerThreads>(split_count, &chunk_splits, split_sums);
    if (active) {
      const int32_t next_blocks = q + 1 < a.num_queries ? blocks_of(a, q + 1) : 0;
      planning::write_query_parts(
          q, pieces, planning::query_opens_first_part(q, cost_begin, pieces, units),
          planning::query_closes_last_part(q, a.num_queries, pieces, next_blocks, units),
          split_offset, units, a.parts);
      a.split_offsets[q + 1] = split_offset + split_count;
    }
    cost_carry += chunk_cost;
    split_carry += chunk_splits;
  }
}

}  // namespace

Status launch_decode_planner(const detail::DecodeParams& p, int num_parts, int64_t min_units,
                             int block_tokens, void* workspace, cudaStream_t stream) {
  const int64_t num_queries = p.problem.b * p.problem.s_q;
  if (num_parts < 1 || block_tokens < 1 || min_units < 0) {
    return {StatusCode::kInternal,
            "launch_decode_planner: num_parts = " + std::to_string(num_parts) +
                " and block_tokens = " + std::to_string(block_tokens) +
                " must be >= 1, min_units = " + std::to_string(min_units) + " must be >= 0"};
  }
  if (num_queries > INT32_MAX - 1) {
    return unsupported("sparse_decode planner: b * s_q = " + std::to_string(num_queries) +
                       " exceeds the schedule's int32 query index");
  }
  if (workspace == nullptr) return {StatusCode::kInternal, "launch_decode_planner: no workspace"};
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(num_queries, num_parts, p.problem.h_q, p.problem.d_v);
  const planning::DecodeWorkspace ws = planning::carve_decode_workspace(workspace, layout);

  PlannerArgs args;
  args.list = p.list;
  args.extra_list = p.has_extra ? p.extra_list : detail::IndexListParams{};
  args.s_q = p.problem.s_q;
  args.num_queries = static_cast<int32_t>(num_queries);
  args.num_parts = num_parts;
  args.min_units = min_units;
  args.block_tokens = block_tokens;
  args.parts = ws.parts;
  args.split_offsets = ws.split_offsets;
  decode_planner_kernel<<<1, kPlannerThreads, 0, stream>>>(args);
  return check_last_launch("decode_planner_kernel");
}

}  // namespace sparse_mla::cuda
