// The index union kernel (cuda/planning/index_union.cu) against the host union
// (index_union_host.h): for random requests of 2..8 tokens (lists with repeats within and across
// tokens, invalid entries, lengths per request or per token, padded strides, an extra list over a
// cache of its own size), every request's union indices, bits and length must be the host's entry
// for entry, and the region past the union -1 / 0 up to the capacity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "index_union_host.h"

#if defined(SMLA_WITH_CUDA)
#include "core/params.h"
#include "cuda/planning/launch.h"
#include "planning/index_union.h"

namespace sparse_mla {
namespace {

using test_support::kGpu;

// One list of b requests x s_q tokens on the host and the device.
struct ListCase {
  int64_t topk = 0, num_slots = 0;
  int64_t stride_b = 0, stride_s = 0;  // of the indices
  std::vector<int32_t> indices;
  int length_kind = 0;           // 0 none, 1 per request [b], 2 per token [b, s_q]
  std::vector<int32_t> lengths;  // as the kind says
  Buffer device_indices, device_lengths;
};

Status make_list(std::mt19937& rng, int64_t b, int64_t s_q, int64_t topk, int64_t num_slots,
                 double shared, ListCase* list) {
  list->topk = topk;
  list->num_slots = num_slots;
  list->stride_s = topk + 3;
  list->stride_b = s_q * list->stride_s + 5;
  list->indices.assign(b * list->stride_b, 0x7fffffff);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t t = 0; t < s_q; ++t) {
      for (int64_t k = 0; k < topk; ++k) {
        int32_t v;
        const double u = unit(rng);
        if (u < 0.05) {
          v = -1 - static_cast<int32_t>(rng() % 4);
        } else if (u < 0.08) {
          v = static_cast<int32_t>(num_slots + rng() % 4);
        } else {
          v = static_cast<int32_t>(rng() % num_slots);
        }
        if (t > 0 && unit(rng) < shared) v = list->indices[r * list->stride_b + k];
        list->indices[r * list->stride_b + t * list->stride_s + k] = v;
      }
    }
  }
  list->length_kind = static_cast<int>(rng() % 3);
  if (list->length_kind != 0) {
    list->lengths.resize(list->length_kind == 1 ? b : b * s_q);
    for (int32_t& n : list->lengths) {
      const uint32_t pick = rng() % 5;
      n = pick == 0   ? 0
          : pick == 1 ? static_cast<int32_t>(topk + 100)  // clamped to topk
                      : static_cast<int32_t>(rng() % (topk + 1));
    }
    SMLA_RETURN_IF_ERROR(test_support::to_device(list->lengths, &list->device_lengths));
  }
  return test_support::to_device(list->indices, &list->device_indices);
}

int host_length(const ListCase& list, int64_t s_q, int64_t r, int64_t t) {
  if (list.length_kind == 0) return static_cast<int>(list.topk);
  const int32_t n = list.lengths[list.length_kind == 1 ? r : r * s_q + t];
  return static_cast<int>(std::clamp<int64_t>(n, 0, list.topk));
}

detail::IndexListParams list_params(const ListCase& list, int64_t s_q) {
  detail::IndexListParams p;
  p.indices = static_cast<const int32_t*>(list.device_indices.data());
  p.indices_stride_b = list.stride_b;
  p.indices_stride_s = list.stride_s;
  p.topk = list.topk;
  if (list.length_kind != 0) {
    p.topk_length = static_cast<const int32_t*>(list.device_lengths.data());
    p.topk_length_stride_b = list.length_kind == 1 ? 1 : s_q;
    p.topk_length_stride_s = list.length_kind == 1 ? 0 : 1;
  }
  return p;
}

// The kernel's union of every request of `list` in `workspace` against host_union.
void check_list(const ListCase& list, int64_t b, int64_t s_q, int64_t capacity,
                const void* workspace, int64_t indices_offset, int64_t bits_offset,
                int64_t count_offset) {
  const auto* base = static_cast<const char*>(workspace);
  std::vector<int32_t> indices, count;
  std::vector<uint8_t> bits;
  SMLA_ASSERT_OK(test_support::to_host(base + indices_offset, b * capacity, &indices));
  SMLA_ASSERT_OK(test_support::to_host(base + bits_offset, b * capacity, &bits));
  SMLA_ASSERT_OK(test_support::to_host(base + count_offset, b, &count));
  for (int64_t r = 0; r < b; ++r) {
    std::vector<std::vector<int32_t>> lists(s_q);
    std::vector<int> lengths(s_q);
    for (int64_t t = 0; t < s_q; ++t) {
      const int32_t* row = &list.indices[r * list.stride_b + t * list.stride_s];
      lists[t].assign(row, row + list.topk);
      lengths[t] = host_length(list, s_q, r, t);
    }
    const planning::HostUnion want = planning::host_union(lists, lengths, list.num_slots);
    const int64_t n = static_cast<int64_t>(want.indices.size());
    ASSERT_EQ(count[r], n) << "request " << r;
    for (int64_t k = 0; k < capacity; ++k) {
      const int32_t want_index = k < n ? want.indices[k] : -1;
      const uint8_t want_bits = k < n ? want.bits[k] : 0;
      ASSERT_EQ(indices[r * capacity + k], want_index) << "request " << r << " entry " << k;
      ASSERT_EQ(bits[r * capacity + k], want_bits) << "request " << r << " entry " << k;
    }
  }
}

TEST(IndexUnionGpu, MatchesTheHostUnionEntryForEntry) {
  SMLA_SKIP_WITHOUT_GPU();
  std::mt19937 rng(23);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t s_q = 2 + trial % (planning::kMaxUnionTokens - 1);
    const int64_t max_topk = planning::kMaxUnionEntries / s_q;
    // Every third trial at the largest union the kernel takes (8192 entries, many chunks).
    const int64_t topk = trial % 3 == 0 ? max_topk : 1 + static_cast<int64_t>(rng() % max_topk);
    const int64_t b = 1 + static_cast<int64_t>(rng() % 40);
    const bool extra = trial % 2 == 1;
    const double shared = (trial % 4) / 3.0;
    // Few slots on some trials: repeats within a list are common.
    const int64_t num_slots =
        trial % 4 == 2 ? 1 + static_cast<int64_t>(rng() % (topk + 1)) : 4 * topk * b + 1;
    SCOPED_TRACE("trial " + std::to_string(trial) + ": b=" + std::to_string(b) +
                 " s_q=" + std::to_string(s_q) + " topk=" + std::to_string(topk) +
                 " slots=" + std::to_string(num_slots) + (extra ? " extra" : ""));
    ListCase main_list, extra_list;
    SMLA_ASSERT_OK(make_list(rng, b, s_q, topk, num_slots, shared, &main_list));
    const int64_t extra_topk = extra ? 1 + static_cast<int64_t>(rng() % max_topk) : 0;
    if (extra) {
      SMLA_ASSERT_OK(make_list(rng, b, s_q, extra_topk, 3 + extra_topk, shared, &extra_list));
    }

    detail::DecodeParams p;
    p.problem.b = b;
    p.problem.s_q = s_q;
    p.problem.h_q = 1;
    p.cache.num_blocks = main_list.num_slots;
    p.cache.page_block_size = 1;
    p.list = list_params(main_list, s_q);
    p.has_extra = extra;
    if (extra) {
      p.extra_cache.num_blocks = extra_list.num_slots;
      p.extra_cache.page_block_size = 1;
      p.extra_list = list_params(extra_list, s_q);
    }
    const planning::IndexUnionLayout layout =
        planning::index_union_layout(0, b, s_q, topk, extra_topk);
    Buffer workspace;
    SMLA_ASSERT_OK(Buffer::allocate(kGpu, layout.end, &workspace));
    SMLA_ASSERT_OK(fill_bytes(workspace.data(), kGpu, 0xAB, layout.end));
    SMLA_ASSERT_OK(cuda::launch_index_union(p, layout, workspace.data(), nullptr));
    SMLA_ASSERT_OK(synchronize(kGpu));
    check_list(main_list, b, s_q, layout.capacity, workspace.data(), layout.indices_offset,
               layout.bits_offset, layout.count_offset);
    if (HasFatalFailure()) return;
    if (extra) {
      check_list(extra_list, b, s_q, layout.extra_capacity, workspace.data(),
                 layout.extra_indices_offset, layout.extra_bits_offset, layout.extra_count_offset);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(IndexUnionGpu, RefusesShapesOutOfItsRange) {
  SMLA_SKIP_WITHOUT_GPU();
  detail::DecodeParams p;
  p.problem.b = 1;
  p.problem.s_q = 2;
  p.list.topk = planning::kMaxUnionEntries;  // 2 x 8192 entries
  Buffer workspace;
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, 4096, &workspace));
  const Status status = cuda::launch_index_union(
      p, planning::index_union_layout(0, 1, 2, p.list.topk, 0), workspace.data(), nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("out of the union's range"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace sparse_mla

#else  // built without CUDA: nothing to launch

TEST(IndexUnionGpu, MatchesTheHostUnionEntryForEntry) { SMLA_SKIP_WITHOUT_GPU(); }

#endif
