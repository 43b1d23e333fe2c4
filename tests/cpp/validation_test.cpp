// Every validation error path of sparse_prefill / plan_sparse_decode / sparse_decode (SPEC §6):
// each bad argument gives kInvalidArgument with a message naming the argument and the value,
// and the outputs are left exactly as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "sparse_mla/sparse_mla.h"
#include "support/call_fixtures.h"
#include "verify/recipe.h"

namespace sparse_mla {
namespace {

using test_support::DecodeFixture;
using test_support::PrefillFixture;

struct PrefillCase {
  const char* name;
  std::function<void(SparsePrefillArgs&)> mutate;
  const char* expected;  // substring of the message
};

class PrefillValidation : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(PrefillValidation, RejectsWithClearMessageAndLeavesOutputs) {
  PrefillFixture f;
  SparsePrefillArgs a = f.args();
  GetParam().mutate(a);
  for (Backend backend : {Backend::kCpu, Backend::kReference}) {
    RunOptions options;
    options.backend = backend;
    Status s = sparse_prefill(a, options);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find("sparse_prefill: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(GetParam().expected), std::string::npos)
        << "message: " << s.message() << "\nexpected to contain: " << GetParam().expected;
    EXPECT_TRUE(f.outputs_untouched());
  }
}

std::vector<PrefillCase> prefill_cases() {
  return {
      {"q_rank", [](auto& a) { a.q.rank = 2; }, "q must have rank 3"},
      {"q_dtype", [](auto& a) { a.q.dtype = DType::kFloat32; }, "q must be bf16, got fp32"},
      {"q_null", [](auto& a) { a.q.data = nullptr; }, "q.data is null"},
      {"h_q_zero", [](auto& a) { a.q.sizes[1] = 0; }, "q.sizes[1] (h_q) = 0 is out of range"},
      {"h_q_129", [](auto& a) { a.q.sizes[1] = 129; }, "q.sizes[1] (h_q) = 129 is out of range"},
      {"d_qk_256", [](auto& a) { a.q.sizes[2] = 256; }, "q.sizes[2] (d_qk) = 256"},
      {"negative_s_q", [](auto& a) { a.q.sizes[0] = -1; }, "q.sizes[0] = -1 is negative"},
      {"negative_stride", [](auto& a) { a.q.strides[0] = -5; }, "q.strides[0] = -5 is negative"},
      {"q_last_dim_stride", [](auto& a) { a.q.strides[2] = 2; },
       "q must be contiguous in its last dimension, got stride 2"},
      {"q_misaligned", [](auto& a) { a.q.data = static_cast<char*>(a.q.data) + 1; },
       "is not aligned"},
      {"kv_h_kv", [](auto& a) { a.kv.sizes[1] = 2; }, "kv.sizes[1] (h_kv) = 2, expected 1"},
      {"kv_d_qk", [](auto& a) { a.kv.sizes[2] = 512; }, "kv.sizes[2] (d_qk) = 512, expected 576"},
      {"kv_dtype", [](auto& a) { a.kv.dtype = DType::kUInt8; }, "kv must be bf16"},
      {"kv_null", [](auto& a) { a.kv.data = nullptr; }, "kv.data is null"},
      {"indices_dtype", [](auto& a) { a.indices.dtype = DType::kFloat32; },
       "indices must be int32"},
      {"indices_s_q", [](auto& a) { a.indices.sizes[0] = 2; },
       "indices.sizes[0] (s_q) = 2, expected 3"},
      {"topk_zero", [](auto& a) { a.indices.sizes[2] = 0; }, "indices.sizes[2] (topk) = 0"},
      {"sm_scale_nan", [](auto& a) { a.sm_scale = std::nanf(""); },
       "sm_scale = nan must be finite"},
      {"sm_scale_unset", [](auto& a) { a.sm_scale = 0.0f; }, "sm_scale = 0 must be finite and > 0"},
      {"sm_scale_huge", [](auto& a) { a.sm_scale = 3e38f; },
       "sm_scale = 3.00000001e+38 is too large: scale * log2(e) must fit an fp32 (at most "
       "2.35865744e+38)"},
      {"q_rank_6", [](auto& a) { a.q.rank = 6; }, "q.rank = 6 is outside [0, 4]"},
      {"out_zero_stride", [](auto& a) { a.out.strides[1] = 0; },
       "out.strides[1] = 0 makes the output overlap itself"},
      {"lse_zero_stride", [](auto& a) { a.lse.strides[0] = 0; },
       "lse.strides[0] = 0 makes the output overlap itself"},
      {"d_v", [](auto& a) { a.d_v = 448; }, "d_v = 448 is not supported"},
      {"sink_shape", [](auto& a) { a.attn_sink->sizes[0] = 5; },
       "attn_sink.sizes[0] (h_q) = 5, expected 4"},
      {"sink_dtype", [](auto& a) { a.attn_sink->dtype = DType::kBFloat16; },
       "attn_sink must be fp32"},
      {"topk_length_shape", [](auto& a) { a.topk_length->sizes[0] = 7; },
       "topk_length.sizes[0] (s_q) = 7, expected 3"},
      {"topk_length_rank", [](auto& a) { a.topk_length->rank = 2; },
       "topk_length must have rank 1"},
      {"out_d_v", [](auto& a) { a.out.sizes[2] = 576; }, "out.sizes[2] (d_v) = 576, expected 512"},
      {"out_null", [](auto& a) { a.out.data = nullptr; }, "out.data is null"},
      {"lse_shape", [](auto& a) { a.lse.sizes[1] = 3; }, "lse.sizes[1] (h_q) = 3, expected 4"},
      {"max_logits_dtype", [](auto& a) { a.max_logits.dtype = DType::kBFloat16; },
       "max_logits must be fp32"},
      {"kv_on_cuda", [](auto& a) { a.kv.device = Device::cuda(0); },
       "kv is on cuda:0 but q is on cpu"},
      {"kv_offsets_overflow", [](auto& a) { a.kv.strides[0] = int64_t{1} << 62; },
       "spans more than 2^63 bytes: its sizes and strides overflow 64-bit offsets"},
      {"q_sizes_overflow", [](auto& a) { a.q.sizes[0] = INT64_MAX; },
       "q ("
       "[9223372036854775807, 4, 576] bf16"},
  };
}

INSTANTIATE_TEST_SUITE_P(AllPaths, PrefillValidation, ::testing::ValuesIn(prefill_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// Validation asks numel() of caller-given sizes before it knows they are sane: the product must
// saturate, not overflow (found by validation_fuzz_test under UBSan).
TEST(TensorViewArithmetic, NumelAndStridesSaturateInsteadOfOverflowing) {
  int x = 0;
  const TensorView huge =
      TensorView::contiguous(&x, DType::kFloat32, {INT64_MAX, 4, int64_t{1} << 40});
  EXPECT_EQ(huge.numel(), INT64_MAX);
  EXPECT_EQ(huge.strides[0], int64_t{1} << 42);
  TensorView empty = huge;
  empty.sizes[2] = 0;
  EXPECT_EQ(empty.numel(), 0);        // an empty view stays empty whatever its other sizes
  EXPECT_TRUE(huge.is_contiguous());  // its last stride product saturates too
  EXPECT_EQ(TensorView::contiguous(&x, DType::kFloat32, {3, 5, 7}).numel(), 105);
}

TEST(PrefillValidation, BackendMustMatchDevice) {
  PrefillFixture f;
  RunOptions options;
  options.backend = Backend::kCuda;
  Status s = sparse_prefill(f.args(), options);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("back end cuda cannot run on tensors on cpu"), std::string::npos)
      << s.message();
  EXPECT_TRUE(f.outputs_untouched());
}

TEST(PrefillValidation, UnknownKernelNameIsRejected) {
  PrefillFixture f;
  RunOptions options;
  options.backend = Backend::kCpu;
  options.kernel = "no_such_kernel";
  Status s = sparse_prefill(f.args(), options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("options.kernel = \"no_such_kernel\""), std::string::npos)
      << s.message();
  EXPECT_TRUE(f.outputs_untouched());
}

// ---- decode --------------------------------------------------------------------------------

// Describes and plans valid decode `args` for `backend` (the options the run must use too).
void plan_valid_decode(const SparseDecodeArgs& args, Backend backend, RunOptions* options,
                       DecodePlan* plan) {
  options->backend = backend;
  SparseDecodeProblem problem;
  ASSERT_TRUE(describe_sparse_decode(args, &problem).ok());
  Status planned = plan_sparse_decode(problem, plan, *options);
  ASSERT_TRUE(planned.ok()) << planned.message();
}

struct DecodeCase {
  const char* name;
  std::function<void(SparseDecodeArgs&)> mutate;
  const char* expected;
};

class DecodeValidation : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeValidation, RejectsWithClearMessageAndLeavesOutputs) {
  DecodeFixture f;
  SparseDecodeArgs good = f.args();
  SparseDecodeArgs bad = good;
  GetParam().mutate(bad);
  for (Backend backend : {Backend::kCpu, Backend::kReference}) {
    RunOptions options;
    DecodePlan plan;
    ASSERT_NO_FATAL_FAILURE(plan_valid_decode(good, backend, &options, &plan));
    std::vector<uint8_t> workspace(plan.workspace_bytes + 1);
    Status s = sparse_decode(bad, plan, workspace.data(), workspace.size(), DecodeSchedule::kBuild,
                             options);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(GetParam().expected), std::string::npos)
        << "message: " << s.message() << "\nexpected to contain: " << GetParam().expected;
    EXPECT_TRUE(f.outputs_untouched());
    SparseDecodeProblem ignored;
    EXPECT_FALSE(describe_sparse_decode(bad, &ignored).ok());
  }
}

std::vector<DecodeCase> decode_cases() {
  return {
      {"q_rank", [](auto& a) { a.q.rank = 3; }, "q must have rank 4"},
      {"h_q_zero", [](auto& a) { a.q.sizes[2] = 0; }, "q.sizes[2] (h_q) = 0 is out of range"},
      {"h_q_200", [](auto& a) { a.q.sizes[2] = 200; }, "q.sizes[2] (h_q) = 200 is out of range"},
      {"d_qk_128", [](auto& a) { a.q.sizes[3] = 128; }, "q.sizes[3] (d_qk) = 128"},
      {"s_q_zero", [](auto& a) { a.q.sizes[1] = 0; }, "q.sizes[1] (s_q) = 0 must be >= 1"},
      {"cache_null", [](auto& a) { a.kv_cache.data = nullptr; }, "kv_cache.data is null"},
      {"cache_blocks", [](auto& a) { a.kv_cache.num_blocks = 0; }, "kv_cache.num_blocks = 0"},
      {"cache_page", [](auto& a) { a.kv_cache.page_block_size = -3; },
       "kv_cache.page_block_size = -3"},
      {"cache_stride_small", [](auto& a) { a.kv_cache.block_stride_bytes -= 576; },
       "kv_cache.block_stride_bytes = 2880 is smaller than the minimum 3456"},
      {"cache_stride_alignment", [](auto& a) { a.kv_cache.block_stride_bytes += 16; },
       "is not a multiple of 576"},
      {"cache_format_d_qk", [](auto& a) { a.kv_cache.format = KvCacheFormat::kV32Fp8; },
       "kv_cache.d_qk = 512 does not match format v32_fp8"},
      {"cache_misaligned",
       [](auto& a) { a.kv_cache.data = static_cast<const char*>(a.kv_cache.data) + 8; },
       "must be 16-byte aligned"},
      {"indices_b", [](auto& a) { a.indices.sizes[0] = 3; },
       "indices.sizes[0] (b) = 3, expected 2"},
      {"indices_dtype", [](auto& a) { a.indices.dtype = DType::kUInt8; }, "indices must be int32"},
      {"topk_length_shape", [](auto& a) { a.topk_length->sizes[0] = 1; },
       "topk_length.sizes[0] (b) = 1, expected 2"},
      {"topk_length_rank3", [](auto& a) { a.topk_length->rank = 3; },
       "topk_length must have shape [b] or [b, s_q]"},
      {"extra_indices_missing", [](auto& a) { a.extra_indices.reset(); },
       "extra_kv_cache is given without extra_indices"},
      {"extra_cache_missing", [](auto& a) { a.extra_kv_cache.reset(); },
       "extra_indices is given without extra_kv_cache"},
      {"extra_format", [](auto& a) { a.extra_kv_cache->format = KvCacheFormat::kBf16; },
       "extra_kv_cache.format = bf16 cannot go with kv_cache.format = v4_fp8 (the extra cache has "
       "the main cache's format)"},
      {"extra_lengths_shape", [](auto& a) { a.extra_topk_length->sizes[1] = 3; },
       "extra_topk_length.sizes[1] (s_q) = 3, expected 2"},
      {"extra_indices_s_q", [](auto& a) { a.extra_indices->sizes[1] = 1; },
       "extra_indices.sizes[1] (s_q) = 1, expected 2"},
      {"scale_inf", [](auto& a) { a.softmax_scale = std::numeric_limits<float>::infinity(); },
       "softmax_scale = inf must be finite"},
      {"scale_huge", [](auto& a) { a.softmax_scale = std::numeric_limits<float>::max(); },
       "softmax_scale = 3.40282347e+38 is too large"},
      {"sink_shape", [](auto& a) { a.attn_sink->sizes[0] = 16; },
       "attn_sink.sizes[0] (h_q) = 16, expected 8"},
      {"out_shape", [](auto& a) { a.out.sizes[2] = 4; }, "out.sizes[2] (h_q) = 4, expected 8"},
      {"lse_rank", [](auto& a) { a.lse.rank = 2; }, "lse must have rank 3"},
      {"lse_null", [](auto& a) { a.lse.data = nullptr; }, "lse.data is null"},
      {"lse_zero_stride", [](auto& a) { a.lse.strides[2] = 0; },
       "lse.strides[2] = 0 makes the output overlap itself"},
      {"unknown_format", [](auto& a) { a.kv_cache.format = static_cast<KvCacheFormat>(7); },
       "kv_cache.format = 7 is not a KV-cache format"},
      {"v4_token_interleaved", [](auto& a) { a.kv_cache.layout = KvLayout::kTokenInterleaved; },
       "kv_cache.layout = token_interleaved is not a layout of format v4_fp8 (it is page_split)"},
      {"unknown_layout", [](auto& a) { a.kv_cache.layout = static_cast<KvLayout>(9); },
       "kv_cache.layout = 9 is not a layout of format v4_fp8"},
      {"extra_v41_fp4_with_v4", [](auto& a) { a.extra_kv_cache->format = KvCacheFormat::kV41Fp4; },
       "extra_kv_cache.format = v41_fp4 cannot go with kv_cache.format = v4_fp8 (the extra cache "
       "has the main cache's format)"},
  };
}

INSTANTIATE_TEST_SUITE_P(AllPaths, DecodeValidation, ::testing::ValuesIn(decode_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DecodeValidation, ArgumentsMustMatchThePlan) {
  DecodeFixture f;
  SparseDecodeArgs a = f.args();
  RunOptions options;
  DecodePlan plan;
  ASSERT_NO_FATAL_FAILURE(plan_valid_decode(a, Backend::kCpu, &options, &plan));
  a.attn_sink.reset();
  std::vector<uint8_t> workspace(plan.workspace_bytes + 1);
  Status s =
      sparse_decode(a, plan, workspace.data(), workspace.size(), DecodeSchedule::kBuild, options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not match the plan: presence of attn_sink"), std::string::npos)
      << s.message();
  EXPECT_TRUE(f.outputs_untouched());
}

TEST(DecodeValidation, EmptyBatchPlansAndRunsWithoutWork) {
  DecodeFixture f;
  SparseDecodeArgs a = f.args();
  for (TensorView* t : {&a.q, &a.indices, &a.out, &a.lse}) t->sizes[0] = 0;
  a.topk_length->sizes[0] = 0;
  a.extra_indices->sizes[0] = 0;
  a.extra_topk_length->sizes[0] = 0;
  for (Backend backend : {Backend::kCpu, Backend::kReference}) {
    RunOptions options;
    DecodePlan plan;
    ASSERT_NO_FATAL_FAILURE(plan_valid_decode(a, backend, &options, &plan));
    Status s = sparse_decode(a, plan, nullptr, 0, DecodeSchedule::kBuild, options);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  EXPECT_TRUE(f.outputs_untouched());
}

TEST(DecodeValidation, HandMadeProblemsAreChecked) {
  DecodeFixture f;
  SparseDecodeProblem problem;
  ASSERT_TRUE(describe_sparse_decode(f.args(), &problem).ok());
  DecodePlan plan;
  SparseDecodeProblem bad = problem;
  bad.h_q = 0;
  Status s = plan_sparse_decode(bad, &plan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("problem.h_q = 0 is out of range"), std::string::npos) << s.message();
  bad = problem;
  bad.format = static_cast<KvCacheFormat>(9);
  s = plan_sparse_decode(bad, &plan);
  EXPECT_NE(s.message().find("problem.format = 9 is not a KV-cache format"), std::string::npos)
      << s.message();
}

// The V4.1 records: layouts named in the errors, the extra-format rule, token_interleaved block
// strides, and plans that tell the layouts apart.
TEST(DecodeValidation, V41LayoutsAndFormatPairs) {
  verify::DecodeRecipe r;
  r.format = KvCacheFormat::kV41Fp8;
  r.kv_layout = KvLayout::kTokenInterleaved;
  r.extra_cache = true;
  r.extra_format = KvCacheFormat::kV41Fp4;
  r.h_q = 8;
  r.topk = 16;
  r.extra_topk = 8;
  r.page_block_size = 5;
  r.padded_strides = false;
  verify::DecodeCase c;
  ASSERT_TRUE(verify::make_decode_case(r, &c).ok());
  verify::DecodeOutputs outputs;
  verify::allocate_outputs(c.problem, &outputs);
  const SparseDecodeArgs good = c.args(outputs.out_view, outputs.lse_view);
  SparseDecodeProblem problem;
  ASSERT_TRUE(describe_sparse_decode(good, &problem).ok());
  EXPECT_EQ(problem.kv_layout, KvLayout::kTokenInterleaved);
  EXPECT_EQ(problem.extra_format, KvCacheFormat::kV41Fp4);
  EXPECT_EQ(problem.extra_kv_layout, KvLayout::kPageSplit);  // the default, resolved
  auto message = [&](const std::function<void(SparseDecodeArgs&)>& mutate) {
    SparseDecodeArgs a = good;
    mutate(a);
    SparseDecodeProblem ignored;
    const Status s = describe_sparse_decode(a, &ignored);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(message([](auto& a) { a.kv_cache.block_stride_bytes += 512; })
                .find("kv_cache.block_stride_bytes = 3152 is not a multiple of 528 as v41_fp8 "
                      "token_interleaved requires"),
            std::string::npos);
  EXPECT_NE(message([](auto& a) { a.extra_kv_cache->block_stride_bytes = 5 * 288; })
                .find("extra_kv_cache.block_stride_bytes = 1440 is not a multiple of 256 as "
                      "v41_fp4 page_split requires"),
            std::string::npos);
  EXPECT_NE(message([](auto& a) {
              a.kv_cache.format = KvCacheFormat::kV41Fp4;
              a.kv_cache.block_stride_bytes = 5 * 288;
              a.extra_kv_cache->format = KvCacheFormat::kV41Fp8;
            }).find("extra_kv_cache.format = v41_fp8 cannot go with kv_cache.format = v41_fp4"),
            std::string::npos);
  EXPECT_NE(message([](auto& a) {
              a.kv_cache.format = KvCacheFormat::kV32Fp8;
              a.kv_cache.d_qk = 576;
              a.kv_cache.layout = KvLayout::kPageSplit;
            })
                .find("kv_cache.layout = page_split is not a layout of format v32_fp8 (it is "
                      "token_interleaved)"),
            std::string::npos);
  // A plan made for one layout refuses the other.
  DecodePlan plan;
  RunOptions options;
  options.backend = Backend::kCpu;
  ASSERT_TRUE(plan_sparse_decode(problem, &plan, options).ok());
  SparseDecodeArgs other = good;
  other.extra_kv_cache->layout = KvLayout::kTokenInterleaved;
  other.extra_kv_cache->block_stride_bytes = 5 * 288;
  Status s = sparse_decode(other, plan, nullptr, 0, DecodeSchedule::kBuild, options);
  EXPECT_NE(s.message().find("do not match the plan: extra_kv_layout"), std::string::npos)
      << s.message();
  // Hand-made problems are checked by name.
  SparseDecodeProblem bad = problem;
  bad.kv_layout = static_cast<KvLayout>(4);
  EXPECT_NE(plan_sparse_decode(bad, &plan)
                .message()
                .find("problem.kv_layout = unknown is not a layout of format v41_fp8"),
            std::string::npos);
  bad = problem;
  bad.format = KvCacheFormat::kV4Fp8;
  bad.kv_layout = KvLayout::kDefault;
  EXPECT_NE(plan_sparse_decode(bad, &plan)
                .message()
                .find("problem.extra_format = v41_fp4 cannot go with format = v4_fp8"),
            std::string::npos);
  bad = problem;
  bad.has_extra = false;
  bad.extra_topk = 0;
  EXPECT_NE(
      plan_sparse_decode(bad, &plan).message().find("extra_format are set but has_extra is false"),
      std::string::npos);
}

TEST(DecodeValidation, PlanForCudaWithoutDeviceIsRefused) {
  DecodeFixture f;
  SparseDecodeProblem problem;
  ASSERT_TRUE(describe_sparse_decode(f.args(), &problem).ok());
  DecodePlan plan;
  RunOptions options;
  options.backend = Backend::kCuda;
  Status s = plan_sparse_decode(problem, &plan, options);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot run on tensors on cpu"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace sparse_mla
