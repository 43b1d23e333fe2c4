#include "planning/decode_part_count.h"

#include <algorithm>
#include <vector>

#include "planning/decode_schedule.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::planning {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The full-list layout of `units`-unit parts: how many parts hold blocks, and the slowest one's
// cost (its blocks + kPieceCostBlocks per piece).
struct FullListLayout {
  int64_t working = 0, slowest = 0;
};

FullListLayout full_list_layout(int64_t num_queries, int64_t bound_blocks, int64_t units) {
  const int64_t query_units = kQueryOverheadBlocks + bound_blocks;
  const int64_t num_parts = ceil_div(num_queries * query_units, units);
  std::vector<int64_t> blocks(num_parts, 0), pieces(num_parts, 0);
  for (int64_t q = 0; q < num_queries; ++q) {
    // The builder's placement of a full query (bound_blocks >= 1: no empty-query special case).
    const QueryPieces placed =
        query_pieces(q * query_units, static_cast<int32_t>(bound_blocks), units);
    const int64_t end = placed.block0_position + bound_blocks;
    for (int64_t p = placed.first_part; p <= placed.last_part; ++p) {
      blocks[p] += std::min(end, (p + 1) * units) - std::max(placed.block0_position, p * units);
      pieces[p] += 1;
    }
  }
  FullListLayout layout;
  for (int64_t p = 0; p < num_parts; ++p) {
    if (blocks[p] == 0) continue;
    ++layout.working;
    layout.slowest = std::max(layout.slowest, blocks[p] + kPieceCostBlocks * pieces[p]);
  }
  return layout;
}

}  // namespace

int64_t estimated_part_cost(int64_t num_queries, int64_t bound_blocks, int32_t resident_slots,
                            int64_t units) {
  const FullListLayout layout = full_list_layout(num_queries, bound_blocks, units);
  return ceil_div(layout.working, resident_slots) * layout.slowest;
}

DecodePartCount choose_decode_part_count(int64_t num_queries, int64_t bound_blocks,
                                         int32_t resident_slots, bool lists_full) {
  const DecodePartCount plain{resident_slots, 0, resident_slots};
  if (num_queries < 1 || bound_blocks < 1 || resident_slots < 1) return plain;
  const int64_t query_units = kQueryOverheadBlocks + bound_blocks;
  const int64_t total = num_queries * query_units;
  const int64_t plain_units = ceil_div(total, resident_slots);
  if (num_queries >= resident_slots) {
    // Whole queries per part where that costs no more by the estimate: no query is split, so no
    // fp32 partials are written and read back and the combine has nothing to merge.
    if (!lists_full) return plain;
    const int64_t whole_units = ceil_div(plain_units, query_units) * query_units;
    if (whole_units == plain_units ||
        estimated_part_cost(num_queries, bound_blocks, resident_slots, whole_units) >
            estimated_part_cost(num_queries, bound_blocks, resident_slots, plain_units)) {
      return plain;
    }
    const auto parts = static_cast<int32_t>(ceil_div(total, whole_units));
    return {parts, whole_units, parts};
  }
  if (plain_units > kMaxSearchedUnits) return plain;
  int64_t best_units = plain_units;
  int64_t best_cost = estimated_part_cost(num_queries, bound_blocks, resident_slots, plain_units);
  // Larger P first, so a tie keeps the fewer parts. At most 4x the resident slots: a candidate
  // with more parts than that is more than 4 waves of working parts or mostly empty parts.
  for (int64_t units = plain_units - 1; units >= 1; --units) {
    if (ceil_div(total, units) > 4 * static_cast<int64_t>(resident_slots)) break;
    const int64_t cost = estimated_part_cost(num_queries, bound_blocks, resident_slots, units);
    if (cost < best_cost) {
      best_cost = cost;
      best_units = units;
    }
  }
  if (best_units == plain_units) return plain;
  return {static_cast<int32_t>(ceil_div(total, best_units)), best_units,
          static_cast<int32_t>(full_list_layout(num_queries, bound_blocks, best_units).working)};
}

}  // namespace sparse_mla::planning
