// Host tests of the index union (planning/index_union.h): its entry rule keeps every token's
// attended multiset exactly (random lists with repeats within and across tokens, invalid entries
// and lengths), the workspace region's layout, and the launch policy's shape rule
// (cuda/decode_launch_policy.h: index_union_fits, index_union_problem, index_union_chosen) and the
// union's call (cuda/index_union_call.h: its workspace and its parameters).
#include "planning/index_union.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/decode_launch_policy.h"
#include "cuda/index_union_call.h"
#include "index_union_host.h"

namespace sparse_mla::planning {
namespace {

TEST(IndexUnion, EveryTokenAttendsExactlyItsOwnValidEntries) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int s_q = 2 + trial % (kMaxUnionTokens - 1);
    const int topk = 1 + static_cast<int>(rng() % 300);
    // Few slots: repeats within a list and across lists are common.
    const int32_t num_slots = 1 + static_cast<int32_t>(rng() % (2 * topk + 1));
    const double shared = (trial % 5) / 4.0;
    std::vector<std::vector<int32_t>> lists(s_q, std::vector<int32_t>(topk));
    std::vector<int> lengths(s_q);
    for (int t = 0; t < s_q; ++t) {
      lengths[t] = static_cast<int>(rng() % (topk + 1));
      for (int k = 0; k < topk; ++k) {
        const uint32_t pick = rng() % 16;
        int32_t v = pick == 0   ? -1 - static_cast<int32_t>(rng() % 5)
                    : pick == 1 ? num_slots + static_cast<int32_t>(rng() % 5)
                                : static_cast<int32_t>(rng() % num_slots);
        if (t > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < shared) v = lists[0][k];
        lists[t][k] = v;
      }
    }
    const HostUnion u = host_union(lists, lengths, num_slots);
    size_t total_valid = 0;
    for (int t = 0; t < s_q; ++t) {
      std::vector<int32_t> own, attended;
      for (int k = 0; k < lengths[t]; ++k) {
        if (lists[t][k] >= 0 && lists[t][k] < num_slots) own.push_back(lists[t][k]);
      }
      for (size_t j = 0; j < u.indices.size(); ++j) {
        if (u.bits[j] & (1u << t)) attended.push_back(u.indices[j]);
      }
      std::sort(own.begin(), own.end());
      std::sort(attended.begin(), attended.end());
      ASSERT_EQ(own, attended) << "trial " << trial << " token " << t;
      total_valid += own.size();
    }
    // Nothing kept that no token attends, and never more entries than the lists' valid ones.
    for (uint8_t b : u.bits) ASSERT_NE(b, 0);
    ASSERT_LE(u.indices.size(), total_valid);
  }
}

TEST(IndexUnion, SharedSlotsAreKeptOnceWithEveryTokensBit) {
  // Tokens 0 and 2 list slot 7, token 1 lists it twice: every occurrence is its own entry.
  // Slot 5 (tokens 0, 1) and slot 9 (token 2 only) are kept once.
  const std::vector<std::vector<int32_t>> lists = {{7, 5, 3}, {5, 7, 7}, {9, 7, 3}};
  const HostUnion u = host_union(lists, {3, 3, 3}, 100);
  const std::vector<int32_t> indices = {7, 5, 3, 7, 7, 9, 7};
  const std::vector<uint8_t> bits = {1, 3, 5, 2, 2, 4, 4};
  EXPECT_EQ(u.indices, indices);
  EXPECT_EQ(u.bits, bits);
  // A token's entry past its length, or out of the cache, is not attended.
  const HostUnion v = host_union({{1, 2}, {2, 100}}, {1, 2}, 100);
  EXPECT_EQ(v.indices, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(v.bits, (std::vector<uint8_t>{1, 2}));
}

TEST(IndexUnion, WorkspaceRegion) {
  const IndexUnionLayout l = index_union_layout(4096, 3, 4, 100, 50);
  EXPECT_EQ(l.capacity, 512);  // 400 rounded up to 128
  EXPECT_EQ(l.extra_capacity, 256);
  const int64_t begins[] = {l.indices_offset,       l.bits_offset,       l.count_offset,
                            l.extra_indices_offset, l.extra_bits_offset, l.extra_count_offset};
  const int64_t sizes[] = {3 * 512 * 4, 3 * 512, 3 * 4, 3 * 256 * 4, 3 * 256, 3 * 4};
  EXPECT_EQ(begins[0], 4096);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(begins[i] % kWorkspaceAlignment, 0) << i;
    const int64_t end = begins[i] + sizes[i];
    EXPECT_LE(end, i < 5 ? begins[i + 1] : l.end) << i;
  }
  EXPECT_EQ(l.end % kWorkspaceAlignment, 0);
  const IndexUnionLayout no_extra = index_union_layout(0, 2, 2, 64, 0);
  EXPECT_EQ(no_extra.extra_capacity, 0);
  EXPECT_EQ(no_extra.capacity, 128);
}

// A decode problem of b requests of s_q tokens, h_q heads, topk slots (d_qk 576).
SparseDecodeProblem problem(int64_t b, int64_t s_q, int64_t h_q, int64_t topk) {
  SparseDecodeProblem p;
  p.b = b;
  p.s_q = s_q;
  p.h_q = h_q;
  p.d_qk = 576;
  p.topk = topk;
  return p;
}

TEST(IndexUnion, LaunchPolicyShapes) {
  const SparseDecodeProblem p = problem(4, 2, 32, 2048);
  EXPECT_TRUE(cuda::index_union_fits(p));
  EXPECT_FALSE(cuda::index_union_chosen(p, std::nullopt));
  EXPECT_FALSE(cuda::index_union_chosen(p, 0));
  EXPECT_TRUE(cuda::index_union_chosen(p, 1));
  const SparseDecodeProblem u = cuda::index_union_problem(p);
  EXPECT_EQ(u.b, 4);
  EXPECT_EQ(u.s_q, 1);
  EXPECT_EQ(u.h_q, 64);
  EXPECT_EQ(u.topk, 4096);
  EXPECT_TRUE(u.has_topk_length);
  EXPECT_FALSE(u.topk_length_per_token);

  SparseDecodeProblem q = p;
  q.s_q = 1;  // nothing to share
  EXPECT_FALSE(cuda::index_union_fits(q));
  q = p;
  q.h_q = 33;  // 66 rows: more than the tile
  EXPECT_FALSE(cuda::index_union_fits(q));
  q = p;
  q.s_q = 4;  // 4 x 2048 entries fit, 4 x 32 rows do not
  q.h_q = 16;
  EXPECT_TRUE(cuda::index_union_fits(q));
  q.topk = 2049;  // more than kMaxUnionEntries entries
  EXPECT_FALSE(cuda::index_union_fits(q));
  q = p;
  q.s_q = 9;  // more tokens than the bits hold
  q.h_q = 4;
  q.topk = 64;
  EXPECT_FALSE(cuda::index_union_fits(q));
  q = p;
  q.has_extra = true;
  q.extra_topk = 4097;  // the extra list's entries count too
  EXPECT_FALSE(cuda::index_union_fits(q));
  q.extra_topk = 512;
  q.has_extra_topk_length = true;
  q.extra_topk_length_per_token = true;
  const SparseDecodeProblem v = cuda::index_union_problem(q);
  EXPECT_EQ(v.extra_topk, 1024);
  EXPECT_TRUE(v.has_extra_topk_length);
  EXPECT_FALSE(v.extra_topk_length_per_token);
}

TEST(IndexUnion, TheUnionsCallAndItsWorkspace) {
  SparseDecodeProblem p = problem(3, 4, 16, 128);
  p.has_extra = true;
  p.extra_topk = 512;
  const SparseDecodeProblem launched = cuda::index_union_problem(p);
  // The unions' region follows the decode's regions of the launched call (3 queries of 64 heads).
  const cuda::Sm90aDecodeWorkspace ws = cuda::sm90a_decode_workspace(p, launched, 132, true);
  const DecodeWorkspaceLayout decode = decode_workspace_layout(3, 132, 64, 512);
  EXPECT_EQ(ws.decode.total_bytes, decode.total_bytes);
  EXPECT_EQ(ws.index_union.indices_offset, decode.total_bytes);
  EXPECT_EQ(ws.index_union.capacity, 512);
  EXPECT_EQ(ws.index_union.extra_capacity, 2048);
  EXPECT_EQ(ws.total_bytes, ws.index_union.end);
  EXPECT_EQ(cuda::sm90a_decode_workspace(p, p, 132, false).total_bytes,
            decode_workspace_layout(12, 132, 16, 512).total_bytes);

  // The union's call: the unions as lists with per-request lengths; q, out, lse and the sink
  // (pointers and strides) the caller's.
  detail::DecodeParams call;
  call.problem = p;
  call.q_stride_b = 4 * 16 * 512 + 8;
  call.q_stride_s = 16 * 512 + 4;
  call.q_stride_h = 512;
  call.has_extra = true;
  call.list.topk = 128;
  call.extra_list.topk = 512;
  call.out_stride_s = 16 * 512 + 8;
  call.lse_stride_s = 20;
  std::vector<uint8_t> workspace(static_cast<size_t>(ws.total_bytes));
  const detail::DecodeParams u =
      cuda::index_union_params(call, launched, ws.index_union, workspace.data());
  EXPECT_EQ(u.problem, launched);
  const IndexUnion regions = carve_index_union(workspace.data(), ws.index_union);
  EXPECT_EQ(u.list.indices, regions.indices);
  EXPECT_EQ(u.list.indices_stride_b, 512);
  EXPECT_EQ(u.list.topk, 512);
  EXPECT_EQ(u.list.topk_length, regions.count);
  EXPECT_EQ(u.list.topk_length_stride_b, 1);
  EXPECT_EQ(u.list.topk_length_stride_s, 0);
  EXPECT_EQ(u.extra_list.indices, regions.extra_indices);
  EXPECT_EQ(u.extra_list.indices_stride_b, 2048);
  EXPECT_EQ(u.extra_list.topk_length, regions.extra_count);
  EXPECT_EQ(u.q_stride_s, call.q_stride_s);
  EXPECT_EQ(u.q_stride_h, call.q_stride_h);
  EXPECT_EQ(u.out_stride_s, call.out_stride_s);
  EXPECT_EQ(u.lse_stride_s, call.lse_stride_s);
}

}  // namespace
}  // namespace sparse_mla::planning
