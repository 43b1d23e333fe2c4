// The split-KV combine kernel against a host merge in double: random partial results (log2-domain
// LSEs with empty pieces at -inf whose outputs are NaN and must not be read, queries whose pieces
// are all empty, more pieces than a warp has lanes), sinks finite / -inf / +inf or absent, padded
// output strides (vector and scalar stores), head counts that leave the last CTA's warps partly
// idle. Queries that are not split must stay untouched. The cases reach both tilings of the kernel
// (1 or 4 warps per head, by grid size); ctest's gpu_combine_slices_{1,4} force each on all.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "sparse_mla/kv_cache_codec.h"
#include "verify/compare.h"

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/params.h"
#include "cuda/combine/launch.h"
#include "planning/decode_workspace.h"

namespace sparse_mla {
namespace {

using test_support::kGpu;
constexpr int64_t kDv = 512;
constexpr uint16_t kOutSentinel = 0xFFFF;      // bf16 NaN: the fill of `out` before the launch
constexpr uint32_t kLseSentinel = 0xFFFFFFFF;  // fp32 NaN: the fill of `lse`
constexpr float kInf = std::numeric_limits<float>::infinity();

struct CombineCase {
  int64_t b, s_q, h_q;
  int64_t out_pad;  // extra elements per head row of `out` (odd: scalar stores)
  bool sink;
};

void run_case(const CombineCase& cc, uint64_t seed) {
  SCOPED_TRACE("b=" + std::to_string(cc.b) + " s_q=" + std::to_string(cc.s_q) +
               " h_q=" + std::to_string(cc.h_q) + " out_pad=" + std::to_string(cc.out_pad) +
               (cc.sink ? " sink" : ""));
  std::mt19937_64 rng(seed);
  const int64_t nq = cc.b * cc.s_q, h_q = cc.h_q;

  // Split counts: 0 (whole), 2..8, and now and then 40 or 140 (more than 32 lanes).
  std::vector<int32_t> split_offsets(nq + 1, 0);
  for (int64_t q = 0; q < nq; ++q) {
    int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    int32_t count = kind < 4    ? 0
                    : kind < 8  ? std::uniform_int_distribution<int32_t>(2, 8)(rng)
                    : kind == 8 ? 40
                                : 140;
    split_offsets[q + 1] = split_offsets[q] + count;
  }
  const int64_t num_slots = split_offsets[nq];
  const int num_parts = static_cast<int>(std::max<int64_t>(1, num_slots));  // room for every slot
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(nq, num_parts, h_q, kDv);

  std::vector<float> partial_lse(layout.max_partials * h_q, 0.0f);
  std::vector<float> partial_out(layout.max_partials * h_q * kDv, 0.0f);
  std::uniform_real_distribution<float> lse_dist(4.0f, 24.0f), value(-1.0f, 1.0f);
  for (int64_t q = 0; q < nq; ++q) {
    const bool lonely = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
    for (int64_t slot = split_offsets[q]; slot < split_offsets[q + 1]; ++slot) {
      for (int64_t h = 0; h < h_q; ++h) {
        const bool empty = lonely || std::uniform_int_distribution<int>(0, 4)(rng) == 0;
        partial_lse[slot * h_q + h] = empty ? -kInf : lse_dist(rng);
        float* row = &partial_out[(slot * h_q + h) * kDv];
        for (int64_t d = 0; d < kDv; ++d) row[d] = empty ? std::nanf("") : value(rng);
      }
    }
  }
  std::vector<float> sinks(h_q);
  for (int64_t h = 0; h < h_q; ++h) {
    sinks[h] = h % 4 == 1   ? -kInf
               : h % 4 == 3 ? kInf
                            : std::uniform_real_distribution<float>(-3, 3)(rng);
  }

  // Device buffers: workspace, sinks, padded outputs filled with the sentinels.
  std::vector<uint8_t> workspace_host(layout.total_bytes, 0);
  std::memcpy(&workspace_host[layout.split_offsets_offset], split_offsets.data(),
              split_offsets.size() * 4);
  std::memcpy(&workspace_host[layout.partial_lse_offset], partial_lse.data(),
              partial_lse.size() * 4);
  std::memcpy(&workspace_host[layout.partial_out_offset], partial_out.data(),
              partial_out.size() * 4);
  Buffer workspace, sink_buffer, out_buffer, lse_buffer;
  SMLA_ASSERT_OK(test_support::to_device(workspace_host, &workspace));
  SMLA_ASSERT_OK(test_support::to_device(sinks, &sink_buffer));
  const int64_t out_stride_h = kDv + cc.out_pad, out_stride_s = h_q * out_stride_h + 16,
                out_stride_b = cc.s_q * out_stride_s;
  const int64_t lse_stride_h = 2, lse_stride_s = h_q * 2 + 1, lse_stride_b = cc.s_q * lse_stride_s;
  const int64_t out_elems = cc.b * out_stride_b, lse_elems = cc.b * lse_stride_b;
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, out_elems * 2, &out_buffer));
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, lse_elems * 4, &lse_buffer));
  SMLA_ASSERT_OK(fill_bytes(out_buffer.data(), kGpu, 0xFF, out_elems * 2));
  SMLA_ASSERT_OK(fill_bytes(lse_buffer.data(), kGpu, 0xFF, lse_elems * 4));

  detail::DecodeParams p;
  p.problem.b = cc.b;
  p.problem.s_q = cc.s_q;
  p.problem.h_q = h_q;
  p.problem.d_v = kDv;
  p.attn_sink = cc.sink ? static_cast<const float*>(sink_buffer.data()) : nullptr;
  p.attn_sink_stride = 1;
  p.out = static_cast<detail::bf16_bits*>(out_buffer.data());
  p.out_stride_b = out_stride_b;
  p.out_stride_s = out_stride_s;
  p.out_stride_h = out_stride_h;
  p.lse = static_cast<float*>(lse_buffer.data());
  p.lse_stride_b = lse_stride_b;
  p.lse_stride_s = lse_stride_s;
  p.lse_stride_h = lse_stride_h;
  SMLA_ASSERT_OK(cuda::launch_split_combine(p, num_parts, workspace.data(), nullptr));
  SMLA_ASSERT_OK(synchronize(kGpu));

  std::vector<uint16_t> out;
  std::vector<uint32_t> lse_bits;
  SMLA_ASSERT_OK(test_support::to_host(out_buffer.data(), out_elems, &out));
  SMLA_ASSERT_OK(test_support::to_host(lse_buffer.data(), lse_elems, &lse_bits));

  // Host merge in double; positions it writes, everything else must keep the sentinel.
  std::vector<bool> out_written(out_elems, false), lse_written(lse_elems, false);
  std::vector<float> got_out, want_out, got_lse, want_lse;
  for (int64_t q = 0; q < nq; ++q) {
    const int64_t begin = split_offsets[q], end = split_offsets[q + 1];
    if (begin == end) continue;
    const int64_t bi = q / cc.s_q, si = q % cc.s_q;
    for (int64_t h = 0; h < h_q; ++h) {
      double m = -INFINITY;
      for (int64_t s = begin; s < end; ++s) m = std::max<double>(m, partial_lse[s * h_q + h]);
      std::vector<double> acc(kDv, 0.0);
      double lse = INFINITY;
      if (m != -INFINITY) {
        double l = 0;
        for (int64_t s = begin; s < end; ++s) l += std::exp2(partial_lse[s * h_q + h] - m);
        const double g = m + std::log2(l);
        lse = g * std::log(2.0);
        const double factor = cc.sink ? 1.0 / (1.0 + std::exp2(sinks[h] * M_LOG2E - g)) : 1.0;
        for (int64_t s = begin; s < end; ++s) {
          if (partial_lse[s * h_q + h] == -kInf) continue;
          const double w = std::exp2(partial_lse[s * h_q + h] - g) * factor;
          for (int64_t d = 0; d < kDv; ++d) acc[d] += w * partial_out[(s * h_q + h) * kDv + d];
        }
      }
      const int64_t o = bi * out_stride_b + si * out_stride_s + h * out_stride_h;
      for (int64_t d = 0; d < kDv; ++d) {
        out_written[o + d] = true;
        got_out.push_back(bf16_to_float(out[o + d]));
        want_out.push_back(static_cast<float>(acc[d]));
      }
      const int64_t li = bi * lse_stride_b + si * lse_stride_s + h * lse_stride_h;
      lse_written[li] = true;
      float got;
      std::memcpy(&got, &lse_bits[li], 4);
      got_lse.push_back(got);
      want_lse.push_back(static_cast<float>(lse));
    }
  }
  for (int64_t i = 0; i < out_elems; ++i) {
    if (!out_written[i]) ASSERT_EQ(out[i], kOutSentinel) << "out element " << i << " was written";
  }
  for (int64_t i = 0; i < lse_elems; ++i) {
    if (!lse_written[i])
      ASSERT_EQ(lse_bits[i], kLseSentinel) << "lse element " << i << " was written";
  }
  verify::CompareResult r_out = verify::compare("out", got_out, want_out, verify::kDecodeOut);
  EXPECT_TRUE(r_out.ok) << r_out.message;
  verify::CompareResult r_lse = verify::compare("lse", got_lse, want_lse, verify::kDecodeLse);
  EXPECT_TRUE(r_lse.ok) << r_lse.message;
}

TEST(SplitCombineGpu, MatchesHostMerge) {
  SMLA_SKIP_WITHOUT_GPU();
  const CombineCase cases[] = {
      {2, 1, 16, 8, true}, {3, 2, 128, 0, true},  {5, 4, 64, 1, true}, {1, 1, 8, 8, false},
      {7, 3, 20, 3, true}, {64, 2, 16, 8, false}, {2, 2, 5, 1, true},  {9, 1, 13, 0, false},
  };
  uint64_t seed = 11;
  for (const CombineCase& cc : cases) {
    run_case(cc, seed++);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace sparse_mla

#else  // built without CUDA: nothing to launch

TEST(SplitCombineGpu, MatchesHostMerge) { SMLA_SKIP_WITHOUT_GPU(); }

#endif
