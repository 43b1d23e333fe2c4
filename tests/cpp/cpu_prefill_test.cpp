// Sparse prefill on the host back ends: the reference against hand-computed cases (so the
// definition of "correct" is itself tested), then the threaded CPU back end against the
// reference over the SPEC §5 recipe (both d_qk, h_q 1-128, topk 1-128, s_kv < topk, s_q 70000,
// padded and contiguous layouts), all through the public API.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "sparse_mla/sparse_mla.h"
#include "verify/check.h"

namespace sparse_mla {
namespace {

using verify::PrefillCase;
using verify::PrefillOutputs;
using verify::PrefillRecipe;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr uint16_t kBf16NaN = 0x7fc0;

RunOptions backend_options(Backend backend, int threads = 0) {
  RunOptions o;
  o.backend = backend;
  o.num_threads = threads;
  return o;
}

// ---- the reference on cases small enough to compute by hand --------------------------------

// One query token, one head, d_qk 512, rows chosen so the scores and outputs have closed forms:
// q = (1, 0, ...); row j = (a_j, 0, ..., v_j at dim 1, ...), so s_j = scale * a_j and
// out[1] = sum_j softmax_j * v_j, every other out dim 0.
struct TinyPrefill {
  static constexpr int64_t kDqk = 512;
  int64_t s_kv, topk;
  std::vector<uint16_t> q, kv;
  std::vector<int32_t> indices;
  std::vector<float> sink;
  std::vector<int32_t> length;
  PrefillOutputs outputs;

  TinyPrefill(std::vector<float> a, std::vector<float> v, std::vector<int32_t> idx)
      : s_kv(static_cast<int64_t>(a.size())),
        topk(static_cast<int64_t>(idx.size())),
        q(kDqk, 0),
        kv(a.size() * kDqk, 0),
        indices(std::move(idx)) {
    q[0] = float_to_bf16(1.0f);
    for (size_t j = 0; j < a.size(); ++j) {
      kv[j * kDqk + 0] = float_to_bf16(a[j]);
      kv[j * kDqk + 1] = float_to_bf16(v[j]);
    }
  }

  Status run(Backend backend, float scale) {
    SparsePrefillProblem problem{1, s_kv, 1, kDqk, 512, topk};
    verify::allocate_outputs(problem, &outputs);
    SparsePrefillArgs args;
    args.q = TensorView::contiguous(q.data(), DType::kBFloat16, {1, 1, kDqk});
    args.kv = TensorView::contiguous(kv.data(), DType::kBFloat16, {s_kv, 1, kDqk});
    args.indices = TensorView::contiguous(indices.data(), DType::kInt32, {1, 1, topk});
    args.sm_scale = scale;
    if (!sink.empty()) args.attn_sink = TensorView::contiguous(sink.data(), DType::kFloat32, {1});
    if (!length.empty()) {
      args.topk_length = TensorView::contiguous(length.data(), DType::kInt32, {1});
    }
    args.out = outputs.out_view;
    args.max_logits = outputs.max_logits_view;
    args.lse = outputs.lse_view;
    return sparse_prefill(args, backend_options(backend));
  }
  float out(int d) const { return bf16_to_float(outputs.out[d]); }
  float lse() const { return outputs.lse[0]; }
  float max_logit() const { return outputs.max_logits[0]; }
};

class HandComputedPrefill : public ::testing::TestWithParam<Backend> {};

TEST_P(HandComputedPrefill, TwoRowsSoftmax) {
  TinyPrefill t({1.0f, -0.5f}, {2.0f, -4.0f}, {0, 1});
  ASSERT_TRUE(t.run(GetParam(), 0.5f).ok());
  const double s0 = 0.5, s1 = -0.25;
  const double lse = std::log(std::exp(s0) + std::exp(s1));
  const double out1 = (std::exp(s0) * 2.0 + std::exp(s1) * -4.0) / std::exp(lse);
  EXPECT_NEAR(t.lse(), lse, 1e-6);
  EXPECT_NEAR(t.max_logit(), s0, 1e-6);
  EXPECT_NEAR(t.out(1), out1, std::fabs(out1) / 128);
  EXPECT_EQ(t.out(0), static_cast<float>(bf16_to_float(float_to_bf16(static_cast<float>(
                          (std::exp(s0) * 1.0 + std::exp(s1) * -0.5) / std::exp(lse))))));
  for (int d = 2; d < 512; ++d) ASSERT_EQ(t.out(d), 0.0f) << d;
}

TEST_P(HandComputedPrefill, DuplicatesCountPerOccurrence) {
  // Row 0 twice and row 1 once: weights 2e^s0 : e^s1.
  TinyPrefill t({1.0f, 0.0f}, {3.0f, 1.0f}, {0, 1, 0});
  ASSERT_TRUE(t.run(GetParam(), 1.0f).ok());
  const double z = 2 * std::exp(1.0) + 1.0;
  EXPECT_NEAR(t.lse(), std::log(z), 1e-6);
  EXPECT_NEAR(t.out(1), (2 * std::exp(1.0) * 3.0 + 1.0) / z, 3.0 / 128);
}

TEST_P(HandComputedPrefill, InvalidSlotsAreSkippedAndNeverRead) {
  // Rows 1 and 2 are NaN: only slot value 0 is valid, every other value is out of range or
  // beyond topk_length.
  TinyPrefill t({2.0f, 0.0f, 0.0f}, {5.0f, 0.0f, 0.0f},
                {-1, 0, 3, std::numeric_limits<int32_t>::min(), 114514,
                 std::numeric_limits<int32_t>::max(), -123456, 1, 2});
  for (int64_t j = 1; j < 3; ++j) {
    for (int64_t d = 0; d < 512; ++d) t.kv[j * 512 + d] = kBf16NaN;
  }
  t.length = {7};  // slots 7 and 8 (rows 1, 2) are beyond the length
  ASSERT_TRUE(t.run(GetParam(), 1.0f).ok());
  EXPECT_NEAR(t.lse(), 2.0, 1e-6);  // one valid slot: lse = its score
  EXPECT_EQ(t.max_logit(), 2.0f);
  EXPECT_EQ(t.out(1), 5.0f);
}

TEST_P(HandComputedPrefill, LonelyQuery) {
  TinyPrefill t({1.0f}, {1.0f}, {-1, 1, 5});
  t.sink = {0.5f};
  ASSERT_TRUE(t.run(GetParam(), 1.0f).ok());
  EXPECT_EQ(t.lse(), kInf);
  EXPECT_EQ(t.max_logit(), -kInf);
  for (int d = 0; d < 512; ++d) ASSERT_EQ(t.outputs.out[d], 0) << d;  // +0.0 exactly
}

TEST_P(HandComputedPrefill, TopkLengthZeroIsLonely) {
  TinyPrefill t({1.0f}, {1.0f}, {0, 0});
  t.length = {0};
  ASSERT_TRUE(t.run(GetParam(), 1.0f).ok());
  EXPECT_EQ(t.lse(), kInf);
  EXPECT_EQ(t.max_logit(), -kInf);
  EXPECT_EQ(t.out(1), 0.0f);
}

TEST_P(HandComputedPrefill, SinkScalesOutputOnly) {
  for (float sink : {-kInf, 0.25f, kInf}) {
    TinyPrefill t({1.0f, 0.0f}, {1.0f, 1.0f}, {0, 1});  // V = 1 everywhere in dim 1
    t.sink = {sink};
    ASSERT_TRUE(t.run(GetParam(), 1.0f).ok());
    const double lse = std::log(std::exp(1.0) + 1.0);
    const double factor = 1.0 / (1.0 + std::exp(double(sink) - lse));
    EXPECT_NEAR(t.lse(), lse, 1e-6) << sink;  // lse and max_logits ignore the sink
    EXPECT_NEAR(t.max_logit(), 1.0, 1e-6) << sink;
    EXPECT_NEAR(t.out(1), factor, 1.0 / 128) << sink;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, HandComputedPrefill,
                         ::testing::Values(Backend::kReference, Backend::kCpu),
                         [](const auto& info) { return std::string(backend_name(info.param)); });

// ---- the CPU back end against the reference over the SPEC §5 recipe -------------------------

void expect_cpu_matches_reference(const PrefillRecipe& recipe, int threads = 0) {
  PrefillCase c;
  ASSERT_TRUE(verify::make_prefill_case(recipe, &c).ok());
  PrefillOutputs expected, got;
  Status s = verify::run_reference(c, &expected);
  ASSERT_TRUE(s.ok()) << s.message();
  s = verify::run_host(c, backend_options(Backend::kCpu, threads), &got, recipe.padded_strides);
  ASSERT_TRUE(s.ok()) << s.message();
  verify::CheckReport report = verify::check_prefill(got, expected);
  EXPECT_TRUE(report.ok) << report.message;
}

// (d_qk, h_q, topk)
class PrefillSweep : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(PrefillSweep, CpuMatchesReference) {
  const auto [d_qk, h_q, topk] = GetParam();
  PrefillRecipe r;
  r.d_qk = d_qk;
  r.h_q = h_q;
  r.topk = topk;
  r.s_q = h_q >= 64 ? 3 : 6;
  r.s_kv = 2 * topk + 17;
  r.seed = static_cast<uint64_t>(d_qk * 1000 + h_q * 10 + topk);
  r.padded_strides = (h_q + topk) % 2 == 0;
  expect_cpu_matches_reference(r);
}

INSTANTIATE_TEST_SUITE_P(Recipe, PrefillSweep,
                         ::testing::Combine(::testing::Values(576, 512),
                                            ::testing::Values(1, 8, 16, 32, 64, 128),
                                            ::testing::Values(1, 37, 100, 128)),
                         [](const auto& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_h" +
                                  std::to_string(std::get<1>(info.param)) + "_topk" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(CpuPrefill, OptionalInputsOff) {
  PrefillRecipe r;
  r.attn_sink = false;
  r.topk_length = false;
  r.invalid_indices = false;
  r.empty_queries = false;
  r.padded_strides = false;
  r.h_q = 20;  // not a multiple of the 4-head register block
  r.topk = 300;
  r.s_kv = 1000;
  r.seed = 7;
  expect_cpu_matches_reference(r);
}

TEST(CpuPrefill, SkvSmallerThanTopk) {
  PrefillRecipe r;
  r.s_kv = 20;
  r.topk = 100;
  r.h_q = 13;
  r.s_q = 5;
  r.seed = 11;
  expect_cpu_matches_reference(r);
}

TEST(CpuPrefill, ManyTiles) {  // topk over several 64-row tiles, partial last tile
  PrefillRecipe r;
  r.topk = 333;
  r.s_kv = 500;
  r.h_q = 16;
  r.s_q = 4;
  r.d_qk = 512;
  r.seed = 12;
  expect_cpu_matches_reference(r);
}

TEST(CpuPrefill, SeventyThousandQueryTokens) {
  PrefillRecipe r;
  r.s_q = 70000;
  r.h_q = 1;
  r.topk = 2;
  r.s_kv = 4096;
  r.seed = 13;
  expect_cpu_matches_reference(r);
}

TEST(CpuPrefill, ResultDoesNotDependOnThreadCount) {
  PrefillRecipe r;
  r.s_q = 3;  // fewer queries than workers: heads get split into groups
  r.h_q = 64;
  r.topk = 100;
  r.seed = 14;
  PrefillCase c;
  ASSERT_TRUE(verify::make_prefill_case(r, &c).ok());
  PrefillOutputs one;
  ASSERT_TRUE(verify::run_host(c, backend_options(Backend::kCpu, 1), &one).ok());
  for (int threads : {2, 3, 8}) {
    PrefillOutputs many;
    ASSERT_TRUE(verify::run_host(c, backend_options(Backend::kCpu, threads), &many).ok());
    EXPECT_EQ(0, std::memcmp(one.out.data(), many.out.data(), one.out.size() * 2)) << threads;
    EXPECT_EQ(0, std::memcmp(one.lse.data(), many.lse.data(), one.lse.size() * 4)) << threads;
  }
}

TEST(CpuPrefill, PoisonedRowsWouldShow) {
  // The recipe's guarantee that makes the sweep meaningful: rows no valid slot references are
  // NaN, and some index values beyond topk_length point at such rows.
  PrefillRecipe r;
  r.s_q = 8;
  r.topk = 64;
  r.s_kv = 4000;
  r.seed = 15;
  PrefillCase c;
  ASSERT_TRUE(verify::make_prefill_case(r, &c).ok());
  const int64_t kv_stride = c.kv_view.strides[0], idx_stride = c.indices_view.strides[0];
  int64_t poisoned_targets = 0;
  for (int64_t i = 0; i < r.s_q; ++i) {
    const int64_t len =
        std::clamp<int64_t>(c.topk_length[i * c.topk_length_view->strides[0]], 0, r.topk);
    for (int64_t k = len; k < r.topk; ++k) {
      const int32_t idx = c.indices[i * idx_stride + k];
      if (idx >= 0 && idx < r.s_kv && std::isnan(bf16_to_float(c.kv[idx * kv_stride]))) {
        ++poisoned_targets;
      }
    }
  }
  EXPECT_GT(poisoned_targets, 0);
}

}  // namespace
}  // namespace sparse_mla
