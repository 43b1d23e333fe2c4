// Split-KV schedule of a sparse decode call: how the KV work of every query is cut into
// `num_parts` nearly equal pieces (one per CTA of the split kernel), and where partial results
// go. Plain C++ usable from host code (tests, CPU) and device code (a one-warp planner kernel).
//
// Vocabulary. A *query* is one (request, query token) pair, flat index q = b_idx * s_q + s_idx,
// num_queries = b * s_q. Its KV work is its valid-length main list followed by its extra list,
// cut into *blocks* of `block_tokens` slots (the split kernel's KV tile):
//   blocks(q) = ceil(n_main(q) / block_tokens) + ceil(n_extra(q) / block_tokens)
// where n_main/n_extra are the topk lengths clamped to [0, topk] (0 blocks for an empty query).
// The planner walks queries in order and gives each part about
//   (sum_q (blocks(q) + kQueryOverheadBlocks)) / num_parts
// blocks of work, splitting a query across parts where a part's share ends inside it
// (FlashMLA's get_decoding_sched_meta, generalised from requests to queries).
// decode_schedule_builder.h states the exact rule (position on a cost line, so the device computes
// it with prefix sums instead of a serial walk) and piece_partial_slot(), the slot of a piece.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::planning {

// Per-query fixed cost (Q load, output store, softmax epilogue) in units of KV blocks; FlashMLA
// uses 5 for its 64-token blocks.
inline constexpr int kQueryOverheadBlocks = 5;

// One part (one CTA of the split kernel). 32 bytes so a warp reads it in one transaction.
struct alignas(32) DecodePartSchedule {
  int32_t begin_query;  // first query of the part
  int32_t begin_block;  // first block of begin_query to process
  int32_t end_query;    // last query of the part, inclusive; end_query < begin_query = empty part
  int32_t end_block;    // one past the last block of end_query to process
  int32_t begin_split;  // partial-result slot of begin_query's piece when it is split
                        // (split_offsets[begin_query] + piece index), -1 when it is not
  int32_t first_is_split;  // 1 if begin_query is shared with an earlier part
  int32_t last_is_split;   // 1 if end_query is shared with a later part
  int32_t reserved;
};
static_assert(sizeof(DecodePartSchedule) == 32);

// Where partial results of split queries live. A split query q has
// split_count(q) = split_offsets[q+1] - split_offsets[q] partial results (0 if it is not split:
// the part that owns it writes `out`/`lse` directly). Partial results are indexed
// split_offsets[q] + k, k in [0, split_count(q)), in part order. Only a part's first and last
// query can be split, so there are at most 2 * num_parts of them (and at most
// num_queries + num_parts: each part boundary adds one piece): b=321, s_q=8, h_q=128 on 132
// parts needs 35 MB of partial_out instead of the 690 MB the second bound alone would give.
//   partial_lse  [max_partials, h_q]       fp32, log2 domain (log2 of the sum of exp2 scores), -inf
//                                           for a piece with no valid slot
//   partial_out  [max_partials, h_q, d_v]  fp32, normalised by the piece's own sum
inline SMLA_HOST_DEVICE int64_t max_partials(int64_t num_queries, int64_t num_parts) {
  const int64_t by_boundaries = num_queries + num_parts;
  return by_boundaries < 2 * num_parts ? by_boundaries : 2 * num_parts;
}

}  // namespace sparse_mla::planning
