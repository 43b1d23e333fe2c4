// Device-side decode planning: one launch that reads the device-resident topk lengths and writes
// the split schedule (parts + split_offsets, see planning/decode_workspace.h) into the caller's
// workspace, and one that builds the index union of each request's draft tokens
// (planning/index_union.h). No host synchronisation and no allocation, so both can be captured in
// a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "planning/index_union.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda {

// Builds the schedule of `p` (b*s_q queries; main list plus, with p.has_extra, the extra list;
// lengths per request [b] or per token [b, s_q], clamped to [0, topk]) for `num_parts` parts of at
// least `min_units` cost-line units (0: no floor; planning/decode_part_count.h) and
// `block_tokens`-slot blocks. `workspace` is laid out by decode_workspace_layout(b*s_q, num_parts,
// h_q, d_v); only its parts and split_offsets regions are written.
Status launch_decode_planner(const detail::DecodeParams& p, int num_parts, int64_t min_units,
                             int block_tokens, void* workspace, cudaStream_t stream);

// Builds the index union of every request of `p` (2 <= s_q <= kMaxUnionTokens, s_q x topk and
// s_q x extra_topk <= kMaxUnionEntries) into the region of `workspace` that `layout` describes:
// one CTA per request and list.
Status launch_index_union(const detail::DecodeParams& p, const planning::IndexUnionLayout& layout,
                          void* workspace, cudaStream_t stream);

}  // namespace sparse_mla::cuda
