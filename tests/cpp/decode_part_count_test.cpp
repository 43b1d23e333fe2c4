// Host tests of the decode part-count rule (planning/decode_part_count.h): the rows it was
// measured on, when it keeps the plain count, and, for random shapes, that the schedule the
// chosen count and floor build from full lists (decode_schedule_builder.h) is the one the
// estimate laid out, and never slower by the estimate than the plain count.
#include "planning/decode_part_count.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "planning/decode_schedule.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::planning {
namespace {

int64_t plain_units(int64_t num_queries, int64_t bound_blocks, int32_t slots) {
  const int64_t total = num_queries * (kQueryOverheadBlocks + bound_blocks);
  return (total + slots - 1) / slots;
}

// The estimate recomputed from the schedule build_decode_schedule writes for full lists:
// waves of working parts times the slowest part (its blocks + kPieceCostBlocks per piece).
int64_t cost_of_built_schedule(int64_t num_queries, int64_t bound_blocks, int32_t slots,
                               const DecodePartCount& count, int64_t* most_blocks,
                               int64_t* working_parts = nullptr) {
  std::vector<int32_t> blocks(num_queries, static_cast<int32_t>(bound_blocks));
  std::vector<DecodePartSchedule> parts(count.num_parts);
  std::vector<int32_t> split_offsets(num_queries + 1);
  build_decode_schedule(blocks.data(), static_cast<int32_t>(num_queries), count.num_parts,
                        count.min_units, parts.data(), split_offsets.data());
  int64_t working = 0, slowest = 0;
  *most_blocks = 0;
  for (const DecodePartSchedule& part : parts) {
    if (part.end_query < part.begin_query) continue;
    int64_t part_blocks = 0, pieces = 0;
    for (int32_t q = part.begin_query; q <= part.end_query; ++q) {
      const int32_t first = q == part.begin_query ? part.begin_block : 0;
      const int32_t end = q == part.end_query ? part.end_block : blocks[q];
      part_blocks += end - first;
      pieces += end > first;
    }
    if (part_blocks == 0) continue;
    ++working;
    slowest = std::max(slowest, part_blocks + kPieceCostBlocks * pieces);
    *most_blocks = std::max(*most_blocks, part_blocks);
  }
  if (working_parts != nullptr) *working_parts = working;
  return (working + slots - 1) / slots * slowest;
}

TEST(DecodePartCount, MeasuredV4Rows) {
  // V4 flash lists (128 + 512 slots) in 64-key blocks: 10 blocks per query, one CTA per SM on
  // 132 SMs (benchmarks/results/exp-decode-num-parts-2026-11-30/).
  const DecodePartCount b64 = choose_decode_part_count(64, 10, 132);
  EXPECT_EQ(b64.num_parts, 192);  // measured 0.74x / 0.78x at 32 / 64 heads with 198 parts
  EXPECT_EQ(b64.min_units, 5);
  const DecodePartCount b12 = choose_decode_part_count(12, 10, 132);
  EXPECT_EQ(b12.num_parts, 180);  // 1 block per part; 198-396 parts measured 0.89x / 0.96x
  EXPECT_EQ(b12.min_units, 1);
  // b = 128: the plain 15-unit parts hold one whole query each (measured best).
  const DecodePartCount b128 = choose_decode_part_count(128, 10, 132);
  EXPECT_EQ(b128.num_parts, 132);
  EXPECT_EQ(b128.min_units, 0);
}

TEST(DecodePartCount, MeasuredV4RowsOnTwoCtasPerSm) {
  // The same lists in 32-key blocks (20 per query) on the 16-row register-Q tile: two CTAs per
  // SM, 264 slots (benchmarks/results/ab-decode-part-count-two-ctas-2026-11-30/).
  const DecodePartCount b64 = choose_decode_part_count(64, 20, 264);
  EXPECT_EQ(b64.num_parts, 320);  // 5 units per part instead of 7: measured 0.87x at 8 / 16 heads
  EXPECT_EQ(b64.min_units, 5);
  const DecodePartCount b12 = choose_decode_part_count(12, 20, 264);
  EXPECT_EQ(b12.num_parts, 300);  // 1 unit instead of 2: measured 0.97x / 0.98x
  EXPECT_EQ(b12.min_units, 1);
  // b = 128: two waves of 5-unit parts by the estimate (12 against 14); measured within 1 %.
  const DecodePartCount b128 = choose_decode_part_count(128, 20, 264);
  EXPECT_EQ(b128.num_parts, 640);
  EXPECT_EQ(b128.min_units, 5);
  // V3.2 b = 64, s_q = 2 (64 blocks per query): 35 units per part, nothing to gain.
  const DecodePartCount v32 = choose_decode_part_count(128, 64, 264);
  EXPECT_EQ(v32.num_parts, 264);
  EXPECT_EQ(v32.min_units, 0);
}

TEST(DecodePartCount, WorkingPartsOfTheWarpSpecializedLaunch) {
  // The warp-specialised 16-row kernel: one CTA per SM, 132 slots, 32-key blocks (V4: 20 per
  // query). decode_launch_policy.cpp runs it only where the working parts fit one wave.
  const DecodePartCount b12 = choose_decode_part_count(12, 20, 132);
  EXPECT_EQ(b12.num_parts, 150);  // 2 units per part: 126 hold blocks, one wave (16.2 us)
  EXPECT_EQ(b12.min_units, 2);
  EXPECT_EQ(b12.working_parts, 126);
  const DecodePartCount b64 = choose_decode_part_count(64, 20, 132);
  EXPECT_EQ(b64.num_parts, 320);  // 256 working parts: two waves, left to the split kernel
  EXPECT_EQ(b64.working_parts, 256);
  const DecodePartCount b128 = choose_decode_part_count(128, 20, 132);
  EXPECT_EQ(b128.num_parts, 132);  // the plain count: every part works
  EXPECT_EQ(b128.working_parts, 132);
}

TEST(DecodePartCount, KeepsThePlainCountWhereItHasNothingToGain) {
  const DecodePartCount plain{132, 0, 132};
  auto same = [&](const DecodePartCount& c) {
    return c.num_parts == plain.num_parts && c.min_units == plain.min_units;
  };
  EXPECT_TRUE(same(choose_decode_part_count(132, 10, 132)));   // a query per part already
  EXPECT_TRUE(same(choose_decode_part_count(133, 100, 132)));  // two whole queries: 2x the part
  EXPECT_TRUE(same(choose_decode_part_count(1, 10, 132)));     // 1 unit per part already
  EXPECT_TRUE(same(choose_decode_part_count(64, 256, 132)));   // 127 units: past the search
  EXPECT_TRUE(same(choose_decode_part_count(0, 10, 132)));
  EXPECT_TRUE(same(choose_decode_part_count(5, 0, 132)));  // no blocks
}

TEST(DecodePartCount, RandomShapesBuildTheEstimatedScheduleAndNeverLose) {
  std::mt19937 rng(20261130);
  for (int trial = 0; trial < 2000; ++trial) {
    const int32_t slots = std::uniform_int_distribution<int32_t>(1, 400)(rng);
    const int64_t num_queries = std::uniform_int_distribution<int64_t>(1, slots)(rng);
    const int64_t bound_blocks = std::uniform_int_distribution<int64_t>(1, 80)(rng);
    const std::string what = "trial " + std::to_string(trial) + ": queries " +
                             std::to_string(num_queries) + ", blocks " +
                             std::to_string(bound_blocks) + ", slots " + std::to_string(slots);
    SCOPED_TRACE(what);
    const DecodePartCount chosen = choose_decode_part_count(num_queries, bound_blocks, slots);
    const int64_t plain = plain_units(num_queries, bound_blocks, slots);
    ASSERT_GE(chosen.num_parts, 1);
    ASSERT_LE(chosen.num_parts, 4 * slots);
    int64_t most_blocks = 0, working = 0;
    const int64_t chosen_cost =
        cost_of_built_schedule(num_queries, bound_blocks, slots, chosen, &most_blocks, &working);
    int64_t plain_most = 0;
    const int64_t plain_cost = cost_of_built_schedule(num_queries, bound_blocks, slots,
                                                      DecodePartCount{slots, 0}, &plain_most);
    EXPECT_EQ(plain_cost, estimated_part_cost(num_queries, bound_blocks, slots, plain));
    if (chosen.min_units == 0) {
      EXPECT_EQ(chosen.num_parts, slots);
      EXPECT_EQ(chosen.working_parts, slots);
      continue;
    }
    EXPECT_EQ(chosen.working_parts, working);
    EXPECT_LT(chosen.min_units, plain);
    EXPECT_LE(most_blocks, chosen.min_units);
    EXPECT_EQ(chosen_cost, estimated_part_cost(num_queries, bound_blocks, slots, chosen.min_units));
    EXPECT_LT(chosen_cost, plain_cost);
    if (HasFailure()) return;
  }
}

// The Hopper decode's rows (one CTA per SM, 66 slots per head group at 65..128 heads, 132 at 64)
// with full lists: where the default's parts cut queries, whole queries per part tie in the
// estimate and are taken; where whole queries would leave one part much longer (the b 148 topk
// 16384 rows), the default stays. With lengths tensors the default always stays.
TEST(DecodePartCount, WholeQueriesWhereTheyCostNothing) {
  struct Row {
    int64_t queries, bound_blocks;
    int32_t slots, parts;
    int64_t min_units;
  };
  for (const Row& row : {Row{128, 32, 66, 64, 74},    // V3.2 h128 b 64 (56 queries were split)
                         Row{256, 32, 66, 64, 148},   // V3.2 h128 b 128
                         Row{128, 18, 66, 64, 46},    // V4 h128 128 + 1024 b 64
                         Row{512, 18, 66, 64, 184},   // V4 h128 b 256
                         Row{512, 10, 132, 128, 60},  // V4 h64 128 + 512 b 256
                         Row{500, 3, 132, 125, 32},   // 33 split queries at the same slowest part
                         Row{256, 10, 132, 132, 0},   // V4 h64 b 128: the default is whole already
                         Row{296, 256, 66, 66, 0},    // V3.2 h128 b 148 topk 16384
                         Row{296, 256, 132, 132, 0}}) {
    SCOPED_TRACE("queries " + std::to_string(row.queries) + ", blocks " +
                 std::to_string(row.bound_blocks) + ", slots " + std::to_string(row.slots));
    const DecodePartCount chosen =
        choose_decode_part_count(row.queries, row.bound_blocks, row.slots, /*lists_full=*/true);
    EXPECT_EQ(chosen.num_parts, row.parts);
    EXPECT_EQ(chosen.min_units, row.min_units);
    // With lengths tensors the planner sees shorter lists, which the plain line rebalances.
    const DecodePartCount with_lengths =
        choose_decode_part_count(row.queries, row.bound_blocks, row.slots, /*lists_full=*/false);
    EXPECT_EQ(with_lengths.num_parts, row.slots);
    EXPECT_EQ(with_lengths.min_units, 0);
  }
}

// Random shapes with a query per slot or more and full lists: the choice is the default or whole
// queries; whole queries build a schedule with no split query, no more parts than slots, and no
// higher estimate than the default.
TEST(DecodePartCount, RandomShapesOfManyQueriesSplitNothingOrKeepTheDefault) {
  std::mt19937 rng(20261208);
  int whole = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int32_t slots = std::uniform_int_distribution<int32_t>(1, 300)(rng);
    const int64_t num_queries = std::uniform_int_distribution<int64_t>(slots, 8 * slots)(rng);
    const int64_t bound_blocks = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": queries " + std::to_string(num_queries) +
                 ", blocks " + std::to_string(bound_blocks) + ", slots " + std::to_string(slots));
    const DecodePartCount chosen =
        choose_decode_part_count(num_queries, bound_blocks, slots, /*lists_full=*/true);
    const int64_t plain = plain_units(num_queries, bound_blocks, slots);
    if (chosen.min_units == 0) {
      EXPECT_EQ(chosen.num_parts, slots);
      continue;
    }
    ++whole;
    const int64_t query_units = kQueryOverheadBlocks + bound_blocks;
    EXPECT_EQ(chosen.min_units % query_units, 0);
    EXPECT_GT(chosen.min_units, plain);
    EXPECT_LE(chosen.num_parts, slots);
    EXPECT_EQ(chosen.working_parts, chosen.num_parts);
    EXPECT_LE(estimated_part_cost(num_queries, bound_blocks, slots, chosen.min_units),
              estimated_part_cost(num_queries, bound_blocks, slots, plain));
    std::vector<int32_t> blocks(num_queries, static_cast<int32_t>(bound_blocks));
    std::vector<DecodePartSchedule> parts(chosen.num_parts);
    std::vector<int32_t> split_offsets(num_queries + 1);
    build_decode_schedule(blocks.data(), static_cast<int32_t>(num_queries), chosen.num_parts,
                          chosen.min_units, parts.data(), split_offsets.data());
    EXPECT_EQ(split_offsets[num_queries], 0);
    if (HasFailure()) return;
  }
  EXPECT_GT(whole, 100);  // the rule is not a corner case
}

}  // namespace
}  // namespace sparse_mla::planning
