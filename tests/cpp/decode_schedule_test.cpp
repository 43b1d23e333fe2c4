// Host tests of the split-KV decode schedule (planning/decode_schedule_builder.h) and the
// workspace layout: every block of every query processed exactly once, partial-result slots
// consistent with split_offsets, at most max_partials slots, and every part's cost within
// max(min_units, ceil(total / num_parts)) + kQueryOverheadBlocks, for random lengths (zeros
// included), with and without a floor of units per part.
#include "planning/decode_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "planning/decode_schedule_builder.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::planning {
namespace {

struct Schedule {
  std::vector<int32_t> blocks;  // [num_queries]
  int32_t num_parts = 0;
  int64_t min_units = 0;
  std::vector<DecodePartSchedule> parts;
  std::vector<int32_t> split_offsets;
};

Schedule build(std::vector<int32_t> blocks, int32_t num_parts, int64_t min_units = 0) {
  Schedule s;
  s.blocks = std::move(blocks);
  s.num_parts = num_parts;
  s.min_units = min_units;
  s.parts.resize(num_parts);
  s.split_offsets.resize(s.blocks.size() + 1);
  build_decode_schedule(s.blocks.data(), static_cast<int32_t>(s.blocks.size()), num_parts,
                        min_units, s.parts.data(), s.split_offsets.data());
  return s;
}

// Checks every invariant of decode_schedule.h; `what` names the case in failure messages.
void check_schedule(const Schedule& s, const std::string& what) {
  SCOPED_TRACE(what);
  const int32_t num_queries = static_cast<int32_t>(s.blocks.size());
  // split_offsets: starts at 0, nondecreasing, no single-piece "splits", bounded total.
  ASSERT_EQ(s.split_offsets[0], 0);
  for (int32_t q = 0; q < num_queries; ++q) {
    int32_t count = s.split_offsets[q + 1] - s.split_offsets[q];
    ASSERT_TRUE(count == 0 || count >= 2) << "query " << q << " has split count " << count;
  }
  ASSERT_LE(s.split_offsets[num_queries], max_partials(num_queries, s.num_parts));

  int64_t total = 0;
  for (int32_t b : s.blocks) total += query_cost(b);
  const int64_t bound =
      std::max(s.min_units, (total + s.num_parts - 1) / s.num_parts) + kQueryOverheadBlocks;

  std::vector<std::vector<int>> block_visits(num_queries);
  for (int32_t q = 0; q < num_queries; ++q) block_visits[q].assign(s.blocks[q], 0);
  std::vector<std::vector<int32_t>> pieces(num_queries);  // slots, in part order
  std::vector<std::vector<int32_t>> piece_parts(num_queries);
  int32_t last_end_query = -1;
  for (int32_t p = 0; p < s.num_parts; ++p) {
    const DecodePartSchedule& part = s.parts[p];
    if (part.end_query < part.begin_query) continue;  // empty part
    ASSERT_GE(part.begin_query, 0) << "part " << p;
    ASSERT_LT(part.end_query, num_queries) << "part " << p;
    ASSERT_GE(part.begin_query, last_end_query) << "part " << p << " goes back";
    last_end_query = part.end_query;
    int64_t cost = 0;
    for (int32_t q = part.begin_query; q <= part.end_query; ++q) {
      int32_t first = q == part.begin_query ? part.begin_block : 0;
      int32_t end = q == part.end_query ? part.end_block : s.blocks[q];
      ASSERT_LE(0, first) << "part " << p << " query " << q;
      ASSERT_LE(first, end) << "part " << p << " query " << q;
      ASSERT_LE(end, s.blocks[q]) << "part " << p << " query " << q;
      ASSERT_TRUE(s.blocks[q] == 0 || first < end) << "part " << p << " has an empty piece";
      for (int32_t k = first; k < end; ++k) ++block_visits[q][k];
      cost += query_cost(end - first);
      pieces[q].push_back(piece_partial_slot(part, q, s.split_offsets.data()));
      piece_parts[q].push_back(p);
    }
    EXPECT_LE(cost, bound) << "part " << p << " is over its share";
    EXPECT_EQ(part.first_is_split != 0, part.begin_block > 0) << "part " << p;
    EXPECT_EQ(part.reserved, 0);
  }
  for (int32_t q = 0; q < num_queries; ++q) {
    for (int32_t k = 0; k < s.blocks[q]; ++k) {
      ASSERT_EQ(block_visits[q][k], 1) << "query " << q << " block " << k;
    }
    const int32_t count = s.split_offsets[q + 1] - s.split_offsets[q];
    ASSERT_FALSE(pieces[q].empty()) << "query " << q << " is processed by no part";
    if (count == 0) {
      ASSERT_EQ(pieces[q].size(), 1u) << "query " << q;
      EXPECT_EQ(pieces[q][0], -1) << "query " << q << " is whole but gets a partial slot";
      continue;
    }
    ASSERT_EQ(static_cast<int32_t>(pieces[q].size()), count) << "query " << q;
    for (int32_t k = 0; k < count; ++k) {
      EXPECT_EQ(pieces[q][k], s.split_offsets[q] + k) << "query " << q << " piece " << k;
      const DecodePartSchedule& part = s.parts[piece_parts[q][k]];
      if (q == part.begin_query) {
        EXPECT_EQ(part.first_is_split != 0, k > 0) << "query " << q;
      }
      if (q == part.end_query) {
        EXPECT_EQ(part.last_is_split != 0, k + 1 < count) << "query " << q;
      }
    }
  }
}

// blocks(q) for b requests of s_q tokens, as the planner derives them from topk lengths (clamped
// to [0, topk]); lengths include 0, 1, topk, out-of-range values and everything in between.
std::vector<int32_t> random_blocks(std::mt19937& rng, int64_t b, int64_t s_q, bool per_token,
                                   bool extra, int block_tokens) {
  const int64_t topk = std::uniform_int_distribution<int64_t>(1, 2048)(rng);
  const int64_t extra_topk = std::uniform_int_distribution<int64_t>(1, 1024)(rng);
  auto length = [&](int64_t topk_of_list) {
    switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
      case 0:
        return int64_t{0};
      case 1:
        return int64_t{1};
      case 2:
        return topk_of_list;
      case 3:
        return std::uniform_int_distribution<int64_t>(-5, topk_of_list + 100)(rng);
      default:
        return std::uniform_int_distribution<int64_t>(0, topk_of_list)(rng);
    }
  };
  auto clamp = [](int64_t n, int64_t topk_of_list) {
    return std::clamp<int64_t>(n, 0, topk_of_list);
  };
  std::vector<int32_t> blocks;
  for (int64_t i = 0; i < b; ++i) {
    int64_t request_main = length(topk), request_extra = length(extra_topk);
    for (int64_t t = 0; t < s_q; ++t) {
      int64_t n_main = per_token ? length(topk) : request_main;
      int64_t n_extra = extra ? (per_token ? length(extra_topk) : request_extra) : 0;
      blocks.push_back(query_blocks(clamp(n_main, topk), clamp(n_extra, extra_topk), block_tokens));
    }
  }
  return blocks;
}

TEST(DecodeSchedule, RandomLengthsCoverEveryBlockOnceWithinBalance) {
  std::mt19937 rng(20261129);
  const int32_t part_counts[] = {1, 2, 7, 33, 66, 132, 264};
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t b = trial % 10 == 0 ? 321 : std::uniform_int_distribution<int64_t>(1, 321)(rng);
    const int64_t s_q = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const bool per_token = trial % 2 == 0, extra = trial % 3 == 0;
    const int block_tokens = trial % 4 == 0 ? 16 : 64;
    const int32_t num_parts = part_counts[trial % 7];
    // Every third trial has a floor of units per part, up to 64 (decode_part_count.h's search).
    const int64_t min_units =
        trial % 3 == 1 ? std::uniform_int_distribution<int64_t>(1, 64)(rng) : 0;
    Schedule s =
        build(random_blocks(rng, b, s_q, per_token, extra, block_tokens), num_parts, min_units);
    check_schedule(s, "trial " + std::to_string(trial) + ": b=" + std::to_string(b) +
                          " s_q=" + std::to_string(s_q) + " parts=" + std::to_string(num_parts) +
                          " min_units=" + std::to_string(min_units) + (extra ? " extra" : "") +
                          (per_token ? " per-token" : ""));
    if (testing::Test::HasFatalFailure()) return;
  }
}

TEST(DecodeSchedule, OneLongQuerySplitsOverEveryPart) {
  Schedule s = build({1000}, 132);
  check_schedule(s, "one query, 1000 blocks");
  // 1005 units over 132 parts: 8 units each; the first part also holds the 5 overhead units.
  EXPECT_EQ(s.split_offsets[1], 126);
  EXPECT_EQ(s.parts[0].begin_block, 0);
  EXPECT_EQ(s.parts[0].end_block, 3);
  EXPECT_EQ(s.parts[1].begin_split, 1);
}

TEST(DecodeSchedule, EmptyQueriesAreEachOwnedByOnePart) {
  check_schedule(build(std::vector<int32_t>(321 * 8, 0), 132), "all queries empty");
  check_schedule(build({0, 0, 37, 0, 1, 0}, 132), "empty queries between short ones");
  check_schedule(build({0}, 1), "one empty query, one part");
}

TEST(DecodeSchedule, NoQueriesLeavesEveryPartEmpty) {
  Schedule s = build({}, 5);
  EXPECT_EQ(s.split_offsets[0], 0);
  for (const DecodePartSchedule& part : s.parts) EXPECT_LT(part.end_query, part.begin_query);
}

TEST(DecodeSchedule, QueriesThatFitAPartAreNotSplit) {
  // 4 queries of 3 blocks over 4 parts: 8 units each, exactly one query per part.
  Schedule s = build({3, 3, 3, 3}, 4);
  check_schedule(s, "four equal queries");
  EXPECT_EQ(s.split_offsets[4], 0);
  for (int32_t p = 0; p < 4; ++p) {
    EXPECT_EQ(s.parts[p].begin_query, p);
    EXPECT_EQ(s.parts[p].end_query, p);
  }
}

TEST(DecodeSchedule, FloorOfUnitsKeepsPartsWhereFullListsPutThem) {
  // 64 queries of 10 blocks (V4, 64-key blocks), 192 parts of >= 5 units: every query is one
  // overhead-only part and two parts of 5 blocks (decode_part_count.h).
  Schedule full = build(std::vector<int32_t>(64, 10), 192, 5);
  check_schedule(full, "64 full queries, 192 parts of >= 5 units");
  for (int32_t p = 0; p < 192; ++p) {
    const DecodePartSchedule& part = full.parts[p];
    if (p % 3 == 0) {
      EXPECT_LT(part.end_query, part.begin_query) << "part " << p << " should be empty";
      continue;
    }
    EXPECT_EQ(part.begin_query, p / 3) << "part " << p;
    EXPECT_EQ(part.end_query, p / 3) << "part " << p;
    EXPECT_EQ(part.end_block - part.begin_block, 5) << "part " << p;
  }
  // Half-length lists keep the 5-unit parts: no part holds more than 5 blocks, and the parts past
  // the work stay empty instead of taking smaller shares.
  Schedule half = build(std::vector<int32_t>(64, 5), 192, 5);
  check_schedule(half, "64 half queries, 192 parts of >= 5 units");
  for (int32_t p = 0; p < 192; ++p) {
    const DecodePartSchedule& part = half.parts[p];
    if (part.end_query < part.begin_query) continue;
    EXPECT_EQ(part.begin_query, part.end_query) << "part " << p;
    EXPECT_EQ(part.end_block - part.begin_block, 5) << "part " << p;
    EXPECT_LT(p, 128) << "part " << p << " lies past the work";
  }
}

// full_lists_split_nothing (the run then launches no combine) is never wrong: where it says so,
// the schedule of full lists has no split query; and it says so for whole queries per part.
TEST(DecodeSchedule, FullListsSplitNothingOnlyWhereNoQueryIsSplit) {
  std::mt19937 rng(1208);
  int said = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t num_queries = std::uniform_int_distribution<int32_t>(0, 600)(rng);
    const int32_t blocks = std::uniform_int_distribution<int32_t>(1, 70)(rng);
    const int32_t num_parts = std::uniform_int_distribution<int32_t>(1, 300)(rng);
    const int64_t query_units = query_cost(blocks);
    // No floor, a floor of whole queries, or any floor.
    const int64_t min_units = trial % 3 == 0 ? 0
                              : trial % 3 == 1
                                  ? query_units * std::uniform_int_distribution<int64_t>(1, 4)(rng)
                                  : std::uniform_int_distribution<int64_t>(1, 3 * query_units)(rng);
    const int64_t total = int64_t{num_queries} * query_units;
    // The builder's invariant: the parts hold every unit (decode_part_count.cpp sizes them so).
    if (min_units > 0 && (total + min_units - 1) / min_units > num_parts) continue;
    std::vector<int32_t> lists(num_queries, blocks);
    std::vector<DecodePartSchedule> parts(num_parts);
    std::vector<int32_t> split_offsets(num_queries + 1);
    build_decode_schedule(lists.data(), num_queries, num_parts, min_units, parts.data(),
                          split_offsets.data());
    const bool nothing = full_lists_split_nothing(num_queries, blocks, num_parts, min_units);
    if (nothing) {
      ++said;
      ASSERT_EQ(split_offsets[num_queries], 0)
          << "trial " << trial << ": " << num_queries << " queries of " << blocks << " blocks, "
          << num_parts << " parts, floor " << min_units;
    }
    if (min_units > 0 && min_units % query_units == 0) EXPECT_TRUE(nothing) << trial;
  }
  EXPECT_GT(said, 500);
}

TEST(DecodeWorkspaceLayout, RegionsAreAlignedDisjointAndLargeEnough) {
  for (int64_t num_queries : {int64_t{0}, int64_t{1}, int64_t{2568}}) {
    for (int64_t num_parts : {int64_t{1}, int64_t{132}}) {
      for (int64_t h_q : {int64_t{1}, int64_t{16}, int64_t{128}}) {
        DecodeWorkspaceLayout l = decode_workspace_layout(num_queries, num_parts, h_q, 512);
        EXPECT_EQ(l.max_partials, std::min<int64_t>(num_queries + num_parts, 2 * num_parts));
        const int64_t offsets[] = {l.parts_offset, l.split_offsets_offset, l.partial_lse_offset,
                                   l.partial_out_offset, l.total_bytes};
        for (int64_t o : offsets) EXPECT_EQ(o % kWorkspaceAlignment, 0);
        EXPECT_GE(l.split_offsets_offset - l.parts_offset,
                  num_parts * static_cast<int64_t>(sizeof(DecodePartSchedule)));
        EXPECT_GE(l.partial_lse_offset - l.split_offsets_offset, (num_queries + 1) * 4);
        EXPECT_GE(l.partial_out_offset - l.partial_lse_offset, l.max_partials * h_q * 4);
        EXPECT_GE(l.total_bytes - l.partial_out_offset, l.max_partials * h_q * 512 * 4);
      }
    }
  }
}

}  // namespace
}  // namespace sparse_mla::planning
