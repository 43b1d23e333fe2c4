// Byte layout of the caller-provided decode workspace: the split schedule (written by the planner,
// reused across layers) followed by the partial results of split queries (rewritten every call).
// Every region starts on a 256-byte boundary so that any vector width and a TMA box may read it.
//
//   offset               content
//   parts_offset         [num_parts]              DecodePartSchedule
//   split_offsets_offset [num_queries + 1]        int32
//   partial_lse_offset   [max_partials, h_q]      fp32, log2 domain
//   partial_out_offset   [max_partials, h_q, d_v] fp32
#pragma once

#include <cstddef>
#include <cstdint>

#include "planning/decode_schedule.h"

namespace sparse_mla::planning {

// 256 B: the CUDA allocation granule; also a multiple of every vector and TMA alignment.
inline constexpr int64_t kWorkspaceAlignment = 256;

struct DecodeWorkspaceLayout {
  int64_t max_partials = 0;
  int64_t parts_offset = 0;
  int64_t split_offsets_offset = 0;
  int64_t partial_lse_offset = 0;
  int64_t partial_out_offset = 0;
  int64_t total_bytes = 0;
};

SMLA_HOST_DEVICE inline int64_t align_workspace(int64_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

SMLA_HOST_DEVICE inline DecodeWorkspaceLayout decode_workspace_layout(int64_t num_queries,
                                                                      int64_t num_parts,
                                                                      int64_t h_q, int64_t d_v) {
  DecodeWorkspaceLayout layout;
  layout.max_partials = max_partials(num_queries, num_parts);
  int64_t at = 0;
  layout.parts_offset = at;
  at = align_workspace(at + num_parts * static_cast<int64_t>(sizeof(DecodePartSchedule)));
  layout.split_offsets_offset = at;
  at = align_workspace(at + (num_queries + 1) * static_cast<int64_t>(sizeof(int32_t)));
  layout.partial_lse_offset = at;
  at = align_workspace(at + layout.max_partials * h_q * static_cast<int64_t>(sizeof(float)));
  layout.partial_out_offset = at;
  at = align_workspace(at + layout.max_partials * h_q * d_v * static_cast<int64_t>(sizeof(float)));
  layout.total_bytes = at;
  return layout;
}

// Typed pointers into one workspace laid out by `layout`.
struct DecodeWorkspace {
  DecodePartSchedule* parts;  // [num_parts]
  int32_t* split_offsets;     // [num_queries + 1]
  float* partial_lse;         // [max_partials, h_q]
  float* partial_out;         // [max_partials, h_q, d_v]
};

SMLA_HOST_DEVICE inline DecodeWorkspace carve_decode_workspace(
    void* base, const DecodeWorkspaceLayout& layout) {
  auto* bytes = static_cast<uint8_t*>(base);
  return {reinterpret_cast<DecodePartSchedule*>(bytes + layout.parts_offset),
          reinterpret_cast<int32_t*>(bytes + layout.split_offsets_offset),
          reinterpret_cast<float*>(bytes + layout.partial_lse_offset),
          reinterpret_cast<float*>(bytes + layout.partial_out_offset)};
}

}  // namespace sparse_mla::planning
