// How many parts a decode launch that runs one or two CTAs (or one 2-CTA cluster) per SM cuts its
// KV work into, and the least number of cost-line units each part holds
// (decode_schedule_builder.h).
//
// The cost line balances *units*, and a query's kQueryOverheadBlocks overhead units are not work
// when a part holds nothing else. With one CTA per SM the call takes as long as the part with the
// most blocks, times the waves of working parts (with two, nearly so: V4 b = 64 at 16 heads,
// 264 slots, 7 -> 5 units per part measured 0.87x). Measured on the H200 (V4, 64 heads, b = 64: 10
// blocks of 64 keys per query, 15 units): 132 parts give 8 units per part, so one CTA does 8
// blocks; 198 parts give 5 units, which divide the 15: every query becomes an overhead-only part
// (its CTA does nothing) and two parts of 5 blocks, 128 working CTAs in one wave, 0.78x the time
// (benchmarks/results/exp-decode-num-parts-2026-11-30/).
//
// The rule: with fewer queries than resident slots, lay out b * s_q queries of full lists (the
// host knows only the bound; the planner on the device sees the valid lengths) for each candidate
// units-per-part P below the default's, estimate
//   waves(working parts) * max over parts (blocks + kPieceCostBlocks * pieces),
// and keep the best P. Its part count is ceil(total / P), more than the resident slots where some
// parts are overhead-only, and P becomes the schedule's floor of units per part (`min_units`):
// shorter lists then leave parts empty instead of moving every boundary, so no part ever holds
// more blocks than the estimate assumed.
#pragma once

#include <cstdint>

namespace sparse_mla::planning {

struct DecodePartCount {
  int32_t num_parts = 1;
  int64_t min_units = 0;  // floor of the units per part; 0 = none (the plain cost line)
  // Parts that hold blocks when every list is full (the estimate's layout); the rest hold only
  // queries' overhead units and do nothing. num_parts for the plain count.
  int32_t working_parts = 1;
};

// A piece's fixed cost in the estimate, in blocks: its Q load and its output or fp32 partial
// store (and the combine's read of it). 1 fits the measured b = 12 / 64 / 128 V4 rows.
inline constexpr int kPieceCostBlocks = 1;

// With as many queries as resident slots or more (and full lists, below), the one candidate is
// whole queries per part: P the default's rounded up to a multiple of a query's units (fewer parts
// than slots), taken where the estimate does not rise. The default's P cuts most queries in two at
// V3.2 and V4 b 64-256 (49-81 per head group at 64-128 heads), each piece writing fp32 partials
// that the combine reads back, at the same slowest part (the estimate ties). With fewer queries the
// default (resident_slots parts, no floor) is kept when its part holds more than kMaxSearchedUnits
// units (long lists: one block of imbalance is a small fraction) or when no candidate is better.
inline constexpr int64_t kMaxSearchedUnits = 64;

// num_queries = b * s_q, bound_blocks = blocks of one query with full main and extra lists,
// resident_slots = parts the device runs at once (resident CTAs per head group, or clusters),
// lists_full = the call has no lengths tensors, so every list is full and the layout here is the
// planner's. Whole queries per part only with lists_full: shorter lists under a whole-query floor
// leave half the parts empty and the slowest part near its full-list size (V3.2 h128 b 64 at 8
// of 32 blocks: 48 blocks against the plain line's 16), where the plain line rebalances.
DecodePartCount choose_decode_part_count(int64_t num_queries, int64_t bound_blocks,
                                         int32_t resident_slots, bool lists_full = false);

// The estimate above for units-per-part `units` (tests print it).
int64_t estimated_part_cost(int64_t num_queries, int64_t bound_blocks, int32_t resident_slots,
                            int64_t units);

}  // namespace sparse_mla::planning
