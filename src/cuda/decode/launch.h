// What every decode split kernel (portable and Hopper) and the combine read of a launch: the
// call's validated arguments, the schedule the planner wrote into the workspace, the partial
// results' regions, and the index union's rows where the Hopper decode runs one. Built by
// kernel_tables.cpp, which sequences planner, split kernel and combine.
#pragma once

#include <cstdint>

#include "core/params.h"
#include "planning/decode_schedule.h"

namespace sparse_mla::cuda::decode {

// The index union of each request's tokens (planning/index_union.h), which only the Hopper
// decode reads: the launch's p is then the union's call (s_q 1, the union as each request's
// lists, its lengths as per-request topk_length, s_q x h_q heads), and row r of a request is head
// r % heads_per_token of its token r / heads_per_token, attending the union's entries whose token
// bit (bits, [b, capacity] like the lists) it holds. The combine maps the rows back the same way.
struct IndexUnionRows {
  int heads_per_token = 0;  // 0: the tokens' own lists
  const uint8_t* bits = nullptr;
  const uint8_t* extra_bits = nullptr;
};

// One split-kernel launch: the call's arguments plus the schedule in the workspace.
struct DecodeLaunch {
  detail::DecodeParams p;
  int num_parts = 0;
  const planning::DecodePartSchedule* parts = nullptr;  // [num_parts]
  const int32_t* split_offsets = nullptr;               // [b*s_q + 1]
  float* partial_lse = nullptr;                         // [max_partials, h_q] fp32, log2
  float* partial_out = nullptr;                         // [max_partials, h_q, 512] fp32
  // Two head groups launched as 2-CTA clusters that share each block's gather and dequantisation.
  // The grid is then (num_parts, 2) whatever h_q is, and the launcher does not check: set it only
  // where the launch policy pairs them (decode_launch_policy.cpp: 64-row tiles, 65..128 heads, a
  // quantized format on sm_90+: decode_pair_clusters > 0).
  bool pair_head_groups = false;
  IndexUnionRows index_union;
};

}  // namespace sparse_mla::cuda::decode
