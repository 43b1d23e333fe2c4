// The device decode planner against the host schedule builder: for random topk lengths (per
// request [b] or per token [b, s_q], strided, with and without an extra list, zeros and
// out-of-range values included) the planner must write exactly the host's parts and
// split_offsets, and overwrite every part record.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/params.h"
#include "cuda/planning/launch.h"
#include "planning/decode_schedule_builder.h"
#include "planning/decode_workspace.h"

namespace sparse_mla {
namespace {

using planning::DecodePartSchedule;
using test_support::kGpu;

struct ListCase {
  int64_t topk = 0;
  bool has_lengths = false, per_token = false;
  int64_t stride_b = 0, stride_s = 0;  // of the lengths tensor
  std::vector<int32_t> lengths;        // host copy, strided
  Buffer device;
};

// Random lengths for b requests of s_q tokens; per-token tensors get a padded row stride.
Status make_list(std::mt19937& rng, int64_t b, int64_t s_q, int64_t topk, int kind,
                 ListCase* list) {
  list->topk = topk;
  list->has_lengths = kind != 0;
  list->per_token = kind == 2;
  if (!list->has_lengths) return {};
  list->stride_s = list->per_token ? 1 : 0;
  list->stride_b = list->per_token ? s_q + 3 : 1;
  list->lengths.assign(b * std::max<int64_t>(list->stride_b, 1), -7);
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t t = 0; t < (list->per_token ? s_q : 1); ++t) {
      int32_t n;
      switch (std::uniform_int_distribution<int>(0, 6)(rng)) {
        case 0:
          n = 0;
          break;
        case 1:
          n = 1;
          break;
        case 2:
          n = static_cast<int32_t>(topk);
          break;
        case 3:
          n = -100;
          break;
        case 4:
          n = static_cast<int32_t>(topk + 5000);
          break;
        default:
          n = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(topk))(rng);
      }
      list->lengths[i * list->stride_b + t * list->stride_s] = n;
    }
  }
  return test_support::to_device(list->lengths, &list->device);
}

int64_t host_length(const ListCase& list, int64_t b_idx, int64_t s_idx) {
  if (!list.has_lengths) return list.topk;
  int64_t n = list.lengths[b_idx * list.stride_b + s_idx * list.stride_s];
  return std::clamp<int64_t>(n, 0, list.topk);
}

detail::IndexListParams list_params(const ListCase& list) {
  detail::IndexListParams p;
  p.topk = list.topk;
  if (list.has_lengths) {
    p.topk_length = static_cast<const int32_t*>(list.device.data());
    p.topk_length_stride_b = list.stride_b;
    p.topk_length_stride_s = list.stride_s;
  }
  return p;
}

void run_case(std::mt19937& rng, int64_t b, int64_t s_q, bool extra, int num_parts,
              int64_t min_units, int block_tokens, const std::string& what) {
  SCOPED_TRACE(what);
  ListCase main_list, extra_list;
  const int main_kind = std::uniform_int_distribution<int>(0, 2)(rng);
  SMLA_ASSERT_OK(make_list(rng, b, s_q, std::uniform_int_distribution<int64_t>(1, 2048)(rng),
                           main_kind, &main_list));
  if (extra) {
    SMLA_ASSERT_OK(make_list(rng, b, s_q, std::uniform_int_distribution<int64_t>(1, 1024)(rng),
                             std::uniform_int_distribution<int>(0, 2)(rng), &extra_list));
  }

  detail::DecodeParams params;
  params.problem.b = b;
  params.problem.s_q = s_q;
  params.problem.h_q = 16;
  params.problem.d_v = 512;
  params.list = list_params(main_list);
  params.has_extra = extra;
  if (extra) params.extra_list = list_params(extra_list);

  const int64_t num_queries = b * s_q;
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(num_queries, num_parts, 16, 512);
  Buffer workspace;
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, layout.total_bytes, &workspace));
  // 0xAB everywhere: a part record the planner forgets cannot pass as an empty part.
  SMLA_ASSERT_OK(fill_bytes(workspace.data(), kGpu, 0xAB, layout.total_bytes));
  SMLA_ASSERT_OK(cuda::launch_decode_planner(params, num_parts, min_units, block_tokens,
                                             workspace.data(), nullptr));
  SMLA_ASSERT_OK(synchronize(kGpu));

  std::vector<DecodePartSchedule> got_parts;
  std::vector<int32_t> got_offsets;
  auto* base = static_cast<const char*>(workspace.data());
  SMLA_ASSERT_OK(test_support::to_host(base + layout.parts_offset, num_parts, &got_parts));
  SMLA_ASSERT_OK(
      test_support::to_host(base + layout.split_offsets_offset, num_queries + 1, &got_offsets));

  std::vector<int32_t> blocks(num_queries);
  for (int64_t q = 0; q < num_queries; ++q) {
    const int64_t n_extra = extra ? host_length(extra_list, q / s_q, q % s_q) : 0;
    blocks[q] =
        planning::query_blocks(host_length(main_list, q / s_q, q % s_q), n_extra, block_tokens);
  }
  std::vector<DecodePartSchedule> want_parts(num_parts);
  std::vector<int32_t> want_offsets(num_queries + 1);
  planning::build_decode_schedule(blocks.data(), static_cast<int32_t>(num_queries), num_parts,
                                  min_units, want_parts.data(), want_offsets.data());

  ASSERT_EQ(got_offsets, want_offsets);
  for (int p = 0; p < num_parts; ++p) {
    const DecodePartSchedule& g = got_parts[p];
    const DecodePartSchedule& w = want_parts[p];
    ASSERT_EQ(std::memcmp(&g, &w, sizeof(g)), 0)
        << "part " << p << ": got {" << g.begin_query << "," << g.begin_block << "," << g.end_query
        << "," << g.end_block << "," << g.begin_split << "," << g.first_is_split << ","
        << g.last_is_split << "," << g.reserved << "} want {" << w.begin_query << ","
        << w.begin_block << "," << w.end_query << "," << w.end_block << "," << w.begin_split << ","
        << w.first_is_split << "," << w.last_is_split << "," << w.reserved << "}";
  }
}

TEST(DecodePlannerGpu, MatchesHostScheduleForRandomLengths) {
  SMLA_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  const int part_counts[] = {1, 33, 66, 132, 264};
  for (int trial = 0; trial < 60; ++trial) {
    // Every 5th trial has b = 321, s_q = 8: 2568 queries, three chunks of the planner's CTA.
    const int64_t b = trial % 5 == 0 ? 321 : std::uniform_int_distribution<int64_t>(1, 321)(rng);
    const int64_t s_q = trial % 5 == 0 ? 8 : std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const bool extra = trial % 2 == 1;
    const int num_parts = part_counts[trial % 5];
    const int block_tokens = trial % 3 == 0 ? 16 : 64;
    // Every fourth trial has a floor of units per part (planning/decode_part_count.h).
    const int64_t min_units =
        trial % 4 == 3 ? std::uniform_int_distribution<int64_t>(1, 64)(rng) : 0;
    run_case(rng, b, s_q, extra, num_parts, min_units, block_tokens,
             "trial " + std::to_string(trial) + ": b=" + std::to_string(b) +
                 " s_q=" + std::to_string(s_q) + " parts=" + std::to_string(num_parts) +
                 " min_units=" + std::to_string(min_units) + (extra ? " extra" : ""));
    if (HasFatalFailure()) return;
  }
}

TEST(DecodePlannerGpu, RefusesZeroParts) {
  SMLA_SKIP_WITHOUT_GPU();
  detail::DecodeParams params;
  params.problem.b = 1;
  params.problem.s_q = 1;
  params.problem.h_q = 16;
  params.list.topk = 64;
  Buffer workspace;
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, 4096, &workspace));
  Status status = cuda::launch_decode_planner(params, 0, 0, 64, workspace.data(), nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("num_parts = 0"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace sparse_mla

#else  // built without CUDA: nothing to launch

TEST(DecodePlannerGpu, MatchesHostScheduleForRandomLengths) { SMLA_SKIP_WITHOUT_GPU(); }

#endif
