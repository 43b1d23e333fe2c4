// The host back ends (reference and CPU) against outputs computed by FlashMLA's Hopper kernels
// (tests/data/golden): prefill out / max_logits / lse and decode out / lse, SPEC §5 tolerances.
// An independent implementation agreeing within tolerance pins semantics and byte layouts that
// our own reference could get wrong in the same way as our kernels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sparse_mla/sparse_mla.h"
#include "support/golden.h"
#include "verify/check.h"

namespace sparse_mla {
namespace {

using test_support::GoldenCase;
using test_support::load_golden_case;

RunOptions backend_options(Backend backend) {
  RunOptions o;
  o.backend = backend;
  return o;
}

void expect_close(const verify::CompareResult& r) { EXPECT_TRUE(r.ok) << r.message; }

// (case name, back end)
class GoldenPrefill : public ::testing::TestWithParam<std::tuple<std::string, Backend>> {};

TEST_P(GoldenPrefill, MatchesFlashMla) {
  const auto& [name, backend] = GetParam();
  const GoldenCase c = load_golden_case(name);
  const std::vector<int64_t>& shape = c.tensor("q").shape;  // [s_q, h_q, d_qk]
  const int64_t s_q = shape[0], h_q = shape[1];
  std::vector<uint16_t> out(s_q * h_q * 512);
  std::vector<float> max_logits(s_q * h_q), lse(s_q * h_q);
  SparsePrefillArgs args;
  args.q = c.tensor("q").view();
  args.kv = c.tensor("kv").view();
  args.indices = c.tensor("indices").view();
  args.sm_scale = static_cast<float>(c.scalar("sm_scale"));
  args.attn_sink = c.tensor("attn_sink").view();
  args.topk_length = c.tensor("topk_length").view();
  args.out = TensorView::contiguous(out.data(), DType::kBFloat16, {s_q, h_q, 512});
  args.max_logits = TensorView::contiguous(max_logits.data(), DType::kFloat32, {s_q, h_q});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {s_q, h_q});
  const Status s = sparse_prefill(args, backend_options(backend));
  ASSERT_TRUE(s.ok()) << s.message();

  expect_close(
      verify::compare_bf16("out", out, c.tensor("out").as<uint16_t>(), verify::kPrefillOut));
  expect_close(verify::compare("max_logits", max_logits, c.tensor("max_logits").as<float>(),
                               verify::kPrefillStats));
  expect_close(verify::compare("lse", lse, c.tensor("lse").as<float>(), verify::kPrefillStats));
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenPrefill,
                         ::testing::Combine(::testing::Values("prefill_d576", "prefill_d512"),
                                            ::testing::Values(Backend::kReference, Backend::kCpu)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

class GoldenDecode : public ::testing::TestWithParam<std::tuple<std::string, Backend>> {};

TEST_P(GoldenDecode, MatchesFlashMla) {
  const auto& [name, backend] = GetParam();
  const GoldenCase c = load_golden_case(name);
  const std::vector<int64_t>& shape = c.tensor("q").shape;  // [b, s_q, h_q, d_qk]
  const int64_t b = shape[0], s_q = shape[1], h_q = shape[2];
  std::vector<uint16_t> out(b * s_q * h_q * 512);
  std::vector<float> lse(b * s_q * h_q);
  SparseDecodeArgs args;
  args.q = c.tensor("q").view();
  args.kv_cache = c.cache("kv_cache");
  args.indices = c.tensor("indices").view();
  args.attn_sink = c.tensor("attn_sink").view();
  if (c.has("topk_length")) args.topk_length = c.tensor("topk_length").view();
  if (c.has("extra_kv_cache")) {
    args.extra_kv_cache = c.cache("extra_kv_cache");
    args.extra_indices = c.tensor("extra_indices").view();
    if (c.has("extra_topk_length")) args.extra_topk_length = c.tensor("extra_topk_length").view();
  }
  args.softmax_scale = static_cast<float>(c.scalar("softmax_scale"));
  args.out = TensorView::contiguous(out.data(), DType::kBFloat16, {b, s_q, h_q, 512});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {b, s_q, h_q});

  SparseDecodeProblem problem;
  Status s = describe_sparse_decode(args, &problem);
  ASSERT_TRUE(s.ok()) << s.message();
  DecodePlan plan;
  s = plan_sparse_decode(problem, &plan, backend_options(backend));
  ASSERT_TRUE(s.ok()) << s.message();
  Buffer workspace;
  ASSERT_TRUE(Buffer::allocate(Device::cpu(), plan.workspace_bytes, &workspace).ok());
  s = sparse_decode(args, plan, workspace.data(), plan.workspace_bytes, DecodeSchedule::kBuild,
                    backend_options(backend));
  ASSERT_TRUE(s.ok()) << s.message();

  expect_close(
      verify::compare_bf16("out", out, c.tensor("out").as<uint16_t>(), verify::kDecodeOut));
  // FlashMLA returns lse as [b, h_q, s_q]; ours is [b, s_q, h_q].
  std::span<const float> golden_lse = c.tensor("lse_b_h_sq").as<float>();
  std::vector<float> expected(lse.size());
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t si = 0; si < s_q; ++si) {
      for (int64_t h = 0; h < h_q; ++h) {
        expected[(bi * s_q + si) * h_q + h] = golden_lse[(bi * h_q + h) * s_q + si];
      }
    }
  }
  expect_close(verify::compare("lse", lse, expected, verify::kDecodeLse));
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenDecode,
                         ::testing::Combine(::testing::Values("decode_d576", "decode_d512"),
                                            ::testing::Values(Backend::kReference, Backend::kCpu)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace sparse_mla
