// Sparse decode on the host back ends: the reference against hand-computed cases and against
// the prefill reference on the same (dequantized) rows, then the threaded CPU back end against
// the reference over the SPEC §5 recipe: all cache formats, h_q 1-128, topk 1-128, odd page
// sizes, with and without the extra cache, per-request and per-token lengths, s_q 1-8,
// b up to 321, caches smaller than topk. Everything goes through the public API.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "sparse_mla/sparse_mla.h"
#include "support/cache_formats.h"
#include "verify/check.h"

namespace sparse_mla {
namespace {

using verify::DecodeCase;
using verify::DecodeOutputs;
using verify::DecodeRecipe;

constexpr float kInf = std::numeric_limits<float>::infinity();

RunOptions backend_options(Backend backend, int threads = 0) {
  RunOptions o;
  o.backend = backend;
  o.num_threads = threads;
  return o;
}

// ---- the reference on hand-computed cases ---------------------------------------------------

// A bf16 cache (d_qk 512) holding rows with a closed form: q = (1, 0, ...), row = (a, v, 0...),
// so s = scale * a and out[1] = sum softmax * v. Main cache of page 3, extra cache of page 2.
struct TinyDecode {
  static constexpr int kDqk = 512;
  std::vector<uint16_t> q = std::vector<uint16_t>(kDqk, 0);
  std::vector<uint16_t> main_rows, extra_rows;  // [slots, 512] bf16 = the cache bytes
  std::vector<int32_t> main_idx, extra_idx, main_len, extra_len;
  DecodeOutputs outputs;

  TinyDecode() { q[0] = float_to_bf16(1.0f); }
  static void add_row(std::vector<uint16_t>* rows, float a, float v) {
    size_t at = rows->size();
    rows->resize(at + kDqk, 0);
    (*rows)[at] = float_to_bf16(a);
    (*rows)[at + 1] = float_to_bf16(v);
  }
  static KvCacheView cache(std::vector<uint16_t>* rows, int64_t page) {
    while (rows->size() / kDqk % page != 0) add_row(rows, 0, 0);
    int64_t slots = static_cast<int64_t>(rows->size() / kDqk);
    return KvCacheView{rows->data(), KvCacheFormat::kBf16, slots / page, page, page * kDqk * 2,
                       kDqk,         Device::cpu()};
  }
  Status run(Backend backend, float scale, bool with_extra) {
    SparseDecodeProblem problem;
    problem.b = 1;
    problem.s_q = 1;
    problem.h_q = 1;
    problem.d_v = 512;
    verify::allocate_outputs(problem, &outputs);
    SparseDecodeArgs args;
    args.q = TensorView::contiguous(q.data(), DType::kBFloat16, {1, 1, 1, kDqk});
    args.kv_cache = cache(&main_rows, 3);
    args.indices = TensorView::contiguous(main_idx.data(), DType::kInt32,
                                          {1, 1, static_cast<int64_t>(main_idx.size())});
    if (!main_len.empty()) {
      args.topk_length = TensorView::contiguous(main_len.data(), DType::kInt32, {1});
    }
    if (with_extra) {
      args.extra_kv_cache = cache(&extra_rows, 2);
      args.extra_indices = TensorView::contiguous(extra_idx.data(), DType::kInt32,
                                                  {1, 1, static_cast<int64_t>(extra_idx.size())});
      if (!extra_len.empty()) {
        args.extra_topk_length =
            TensorView::contiguous(extra_len.data(), DType::kInt32, {1, 1});  // per token
      }
    }
    args.softmax_scale = scale;
    args.out = outputs.out_view;
    args.lse = outputs.lse_view;
    return verify::plan_and_run_decode(args, backend_options(backend));
  }
  float out(int d) const { return bf16_to_float(outputs.out[d]); }
};

class HandComputedDecode : public ::testing::TestWithParam<Backend> {};

TEST_P(HandComputedDecode, MainAndExtraFormOneSoftmax) {
  TinyDecode t;
  TinyDecode::add_row(&t.main_rows, 1.0f, 2.0f);    // slot 0
  TinyDecode::add_row(&t.main_rows, 0.0f, 1.0f);    // slot 1
  TinyDecode::add_row(&t.extra_rows, 2.0f, -3.0f);  // extra slot 0
  t.main_idx = {0, 1, -1};
  t.extra_idx = {0, 0, 7};  // 7 >= the extra cache's 2 slots: invalid
  Status s = t.run(GetParam(), 1.0f, true);
  ASSERT_TRUE(s.ok()) << s.message();
  const double w0 = std::exp(1.0), w1 = 1.0, w2 = std::exp(2.0);  // extra row counted twice
  const double z = w0 + w1 + 2 * w2;
  EXPECT_NEAR(t.outputs.lse[0], std::log(z), 1e-6);
  EXPECT_NEAR(t.out(1), (w0 * 2 + w1 * 1 + 2 * w2 * -3) / z, 2.0 / 128);
}

TEST_P(HandComputedDecode, LengthsLimitEachList) {
  TinyDecode t;
  TinyDecode::add_row(&t.main_rows, 1.0f, 2.0f);
  TinyDecode::add_row(&t.main_rows, std::nanf(""), std::nanf(""));  // beyond main length
  TinyDecode::add_row(&t.extra_rows, 0.5f, 4.0f);
  TinyDecode::add_row(&t.extra_rows, std::nanf(""), std::nanf(""));  // beyond extra length
  t.main_idx = {0, 1};
  t.main_len = {1};
  t.extra_idx = {0, 1};
  t.extra_len = {1};
  ASSERT_TRUE(t.run(GetParam(), 2.0f, true).ok());
  const double w0 = std::exp(2.0), w1 = std::exp(1.0);
  EXPECT_NEAR(t.outputs.lse[0], std::log(w0 + w1), 1e-6);
  EXPECT_NEAR(t.out(1), (w0 * 2 + w1 * 4) / (w0 + w1), 2.0 / 128);
}

TEST_P(HandComputedDecode, LonelyQuery) {
  TinyDecode t;
  TinyDecode::add_row(&t.main_rows, 1.0f, 1.0f);
  t.main_idx = {-1, 3, std::numeric_limits<int32_t>::max()};  // the cache has 3 slots
  ASSERT_TRUE(t.run(GetParam(), 1.0f, false).ok());
  EXPECT_EQ(t.outputs.lse[0], kInf);
  for (int d = 0; d < 512; ++d) ASSERT_EQ(t.outputs.out[d], 0) << d;
}

INSTANTIATE_TEST_SUITE_P(Backends, HandComputedDecode,
                         ::testing::Values(Backend::kReference, Backend::kCpu),
                         [](const auto& info) { return std::string(backend_name(info.param)); });

// The decode reference on a quantized cache equals the prefill reference on the dequantized rows
// (exact in bf16: e4m3 values times power-of-two scales, e2m1 values times e4m3 scales) with the
// main and extra lists concatenated, also for V4.1's fp8 main cache with an fp4 extra cache. Ties
// decode's definition to prefill's, which the hand cases pin down.
TEST(ReferenceDecode, EqualsPrefillOnDequantizedRows) {
  struct Caches {
    KvCacheFormat format;
    KvLayout layout;
    KvCacheFormat extra_format;
    KvLayout extra_layout;
  };
  using enum KvCacheFormat;
  using enum KvLayout;
  for (const Caches& caches :
       {Caches{kV32Fp8, kDefault, kV32Fp8, kDefault}, Caches{kV4Fp8, kDefault, kV4Fp8, kDefault},
        Caches{kV41Fp8, kPageSplit, kV41Fp4, kTokenInterleaved},
        Caches{kV41Fp8, kTokenInterleaved, kV41Fp4, kPageSplit},
        Caches{kV41Fp8, kTokenInterleaved, kV41Fp8, kPageSplit}}) {
    const KvCacheFormat format = caches.format;
    DecodeRecipe r;
    r.format = format;
    r.kv_layout = caches.layout;
    r.extra_format = caches.extra_format;
    r.extra_kv_layout = caches.extra_layout;
    r.b = 2;
    r.s_q = 2;
    r.h_q = 8;
    r.topk = 40;
    r.page_block_size = 5;
    r.extra_cache = true;
    r.extra_topk = 24;
    r.extra_page_block_size = 3;
    r.topk_length_per_token = true;
    r.padded_strides = false;
    r.seed = 21;
    DecodeCase c;
    ASSERT_TRUE(verify::make_decode_case(r, &c).ok());
    DecodeOutputs decoded;
    ASSERT_TRUE(verify::run_reference(c, &decoded).ok());

    const int64_t d = c.problem.d_qk, main_slots = c.cache_view.num_slots(),
                  extra_slots = c.extra_cache_view->num_slots();
    std::vector<uint16_t> kv((main_slots + extra_slots) * d);
    ASSERT_TRUE(dequantize_kv_cache(
                    c.cache_view,
                    TensorView::contiguous(kv.data(), DType::kBFloat16,
                                           {c.cache_view.num_blocks, r.page_block_size, 1, d}))
                    .ok());
    ASSERT_TRUE(dequantize_kv_cache(*c.extra_cache_view,
                                    TensorView::contiguous(&kv[main_slots * d], DType::kBFloat16,
                                                           {c.extra_cache_view->num_blocks,
                                                            r.extra_page_block_size, 1, d}))
                    .ok());
    for (int64_t b = 0; b < r.b; ++b) {
      for (int64_t s = 0; s < r.s_q; ++s) {
        // One prefill query = this decode query; its list = main list, then extra slots
        // shifted past the main cache (invalid values and lengths turned into -1).
        const int64_t topk = r.topk + r.extra_topk;
        std::vector<int32_t> indices(topk, -1);
        const int64_t main_len = std::clamp<int64_t>(c.topk_length[b * (r.s_q) + s], 0, r.topk);
        const int64_t extra_len =
            std::clamp<int64_t>(c.extra_topk_length[b], 0, r.extra_topk);  // per request
        for (int64_t k = 0; k < main_len; ++k) {
          int32_t v = c.indices[(b * r.s_q + s) * r.topk + k];
          if (v >= 0 && v < main_slots) indices[k] = v;
        }
        for (int64_t k = 0; k < extra_len; ++k) {
          int32_t v = c.extra_indices[(b * r.s_q + s) * r.extra_topk + k];
          if (v >= 0 && v < extra_slots) indices[r.topk + k] = static_cast<int32_t>(v + main_slots);
        }
        std::vector<uint16_t> out(r.h_q * 512);
        std::vector<float> lse(r.h_q), max_logits(r.h_q);
        SparsePrefillArgs args;
        args.q = TensorView::contiguous(&c.q[(b * r.s_q + s) * r.h_q * d], DType::kBFloat16,
                                        {1, r.h_q, d});
        args.kv =
            TensorView::contiguous(kv.data(), DType::kBFloat16, {main_slots + extra_slots, 1, d});
        args.indices = TensorView::contiguous(indices.data(), DType::kInt32, {1, 1, topk});
        args.sm_scale = static_cast<float>(1.0 / std::sqrt(double(d)));
        args.attn_sink = c.attn_sink_view;
        args.out = TensorView::contiguous(out.data(), DType::kBFloat16, {1, r.h_q, 512});
        args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {1, r.h_q});
        args.max_logits = TensorView::contiguous(max_logits.data(), DType::kFloat32, {1, r.h_q});
        Status st = sparse_prefill(args, backend_options(Backend::kReference));
        ASSERT_TRUE(st.ok()) << st.message();
        const int64_t q = b * r.s_q + s;
        EXPECT_EQ(0, std::memcmp(out.data(), &decoded.out[q * r.h_q * 512], out.size() * 2))
            << kv_cache_format_name(format) << " query " << q;
        EXPECT_EQ(0, std::memcmp(lse.data(), &decoded.lse[q * r.h_q], lse.size() * 4))
            << kv_cache_format_name(format) << " query " << q;
      }
    }
  }
}

// ---- the CPU back end against the reference over the SPEC §5 recipe -------------------------

void expect_cpu_matches_reference(const DecodeRecipe& recipe, int threads = 0) {
  DecodeCase c;
  Status s = verify::make_decode_case(recipe, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  DecodeOutputs expected, got;
  s = verify::run_reference(c, &expected);
  ASSERT_TRUE(s.ok()) << s.message();
  s = verify::run_host(c, backend_options(Backend::kCpu, threads), &got, recipe.padded_strides);
  ASSERT_TRUE(s.ok()) << s.message();
  verify::CheckReport report = verify::check_decode(got, expected);
  EXPECT_TRUE(report.ok) << report.message;
}

using FormatChoice = test_support::CacheFormatCase;
constexpr auto& kFormats = test_support::kAllCacheFormats;
constexpr int64_t kPageSizes[] = {1, 2, 53, 61, 64, 69, 576};

// (format index, h_q, topk); page size, extra cache, length kinds and s_q cycle with the index
// so every value meets every other over the sweep.
class DecodeSweep : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(DecodeSweep, CpuMatchesReference) {
  const auto [f, h_q, topk] = GetParam();
  const int n = f * 1000 + h_q * 7 + topk;  // a case number that varies with every parameter
  DecodeRecipe r;
  r.format = kFormats[f].format;
  r.kv_layout = kFormats[f].layout;
  r.d_qk = kFormats[f].d_qk;
  r.h_q = h_q;
  r.topk = topk;
  r.page_block_size = kPageSizes[n % 7];
  r.extra_cache = n % 2 == 1;
  r.extra_topk = 1 + n % 90;
  r.extra_page_block_size = kPageSizes[(n / 7) % 7];
  if (r.format == KvCacheFormat::kV41Fp8) {  // V4.1: an fp4 or fp8 extra cache, either layout
    r.extra_format = (n / 3) % 2 == 0 ? KvCacheFormat::kV41Fp4 : KvCacheFormat::kV41Fp8;
    r.extra_kv_layout = (n / 5) % 2 == 0 ? KvLayout::kPageSplit : KvLayout::kTokenInterleaved;
  }
  r.topk_length_per_token = n % 3 == 1;
  r.extra_topk_length = n % 5 != 0;
  r.extra_topk_length_per_token = n % 3 == 2;
  r.padded_strides = n % 4 < 2;
  // Keep the reference's work (double, one thread) near 1M multiply-adds per case.
  const int64_t work_per_query = h_q * (topk + (r.extra_cache ? r.extra_topk : 0));
  const int64_t queries = std::clamp<int64_t>(2'000'000 / (work_per_query * 1088), 1, 16);
  r.s_q = 1 + n % std::min<int64_t>(queries, 8);
  r.b = std::max<int64_t>(1, queries / r.s_q);
  r.seed = static_cast<uint64_t>(n);
  expect_cpu_matches_reference(r);
}

INSTANTIATE_TEST_SUITE_P(Recipe, DecodeSweep,
                         ::testing::Combine(::testing::Range(0,
                                                             static_cast<int>(std::size(kFormats))),
                                            ::testing::Values(1, 8, 16, 32, 64, 128),
                                            ::testing::Values(1, 37, 100, 128)),
                         [](const auto& info) {
                           const FormatChoice& f = kFormats[std::get<0>(info.param)];
                           return f.name() + "_d" + std::to_string(f.d_qk) + "_h" +
                                  std::to_string(std::get<1>(info.param)) + "_topk" +
                                  std::to_string(std::get<2>(info.param));
                         });

// DeepSeek V4.1: a v41_fp8 main cache alone or with a v41_fp8 / v41_fp4 extra cache, every
// layout pair, h_q 8/16/64/128, s_q 1-6 (one token plus drafts), the window list 128 + drafts
// (padded to 192 when drafting) and a 512-slot compressed list, page sizes cycling through SPEC
// §5's odd sizes and V4.1's 256 / 64.
enum class V41Extra { kNone, kFp8PageSplit, kFp8Interleaved, kFp4PageSplit, kFp4Interleaved };

const char* v41_extra_name(V41Extra extra) {
  static constexpr const char* kNames[] = {"alone", "fp8_page_split", "fp8_interleaved",
                                           "fp4_page_split", "fp4_interleaved"};
  return kNames[static_cast<int>(extra)];
}

class V41DecodeSweep
    : public ::testing::TestWithParam<std::tuple<KvLayout, V41Extra, int /*h_q*/>> {};

TEST_P(V41DecodeSweep, CpuMatchesReference) {
  const auto [layout, extra, h_q] = GetParam();
  const int e = static_cast<int>(extra);
  const int l = layout == KvLayout::kPageSplit ? 0 : 1;
  const int h = h_q == 8 ? 0 : h_q == 16 ? 1 : h_q == 64 ? 2 : 3;
  // A case number whose residues mod 8 (page) meet every value over the sweep.
  const int n = e * 2 + l + 3 * h + 10 * (e % 3);
  constexpr int64_t kPages[] = {1, 2, 53, 61, 64, 69, 576, 256};
  DecodeRecipe r;
  r.format = KvCacheFormat::kV41Fp8;
  r.kv_layout = layout;
  r.h_q = h_q;
  r.s_q = 1 + (e + 2 * l + h) % 6;  // 1..6 over the sweep
  r.topk = r.s_q == 1 ? 128 : 192;
  r.page_block_size = kPages[n % 8];
  r.extra_cache = extra != V41Extra::kNone;
  if (r.extra_cache) {
    r.extra_format = e <= 2 ? KvCacheFormat::kV41Fp8 : KvCacheFormat::kV41Fp4;
    r.extra_kv_layout = e % 2 == 1 ? KvLayout::kPageSplit : KvLayout::kTokenInterleaved;
    r.extra_topk = h_q >= 64 ? 100 : 512;  // keeps the double reference near a second
    r.extra_page_block_size = kPages[(n + 3) % 8];
  }
  r.topk_length_per_token = n % 2 == 0;
  r.extra_topk_length_per_token = n % 3 == 0;
  r.padded_strides = n % 4 != 3;
  r.b = h_q >= 64 ? 1 : 2;
  r.seed = static_cast<uint64_t>(4100 + n);
  expect_cpu_matches_reference(r);
}

INSTANTIATE_TEST_SUITE_P(
    Recipe, V41DecodeSweep,
    ::testing::Combine(::testing::Values(KvLayout::kPageSplit, KvLayout::kTokenInterleaved),
                       ::testing::Values(V41Extra::kNone, V41Extra::kFp8PageSplit,
                                         V41Extra::kFp8Interleaved, V41Extra::kFp4PageSplit,
                                         V41Extra::kFp4Interleaved),
                       ::testing::Values(8, 16, 64, 128)),
    [](const auto& info) {
      return std::string(kv_layout_name(std::get<0>(info.param))) + "_extra_" +
             v41_extra_name(std::get<1>(info.param)) + "_h" +
             std::to_string(std::get<2>(info.param));
    });

TEST(CpuDecode, ManyRequestsSmallTopk) {
  DecodeRecipe r;
  r.b = 321;
  r.s_q = 2;
  r.h_q = 8;
  r.topk = 5;
  r.extra_cache = true;
  r.extra_topk = 3;
  r.page_block_size = 61;
  r.seed = 31;
  expect_cpu_matches_reference(r);
}

TEST(CpuDecode, MtpQueriesPerTokenLengths) {
  DecodeRecipe r;
  r.format = KvCacheFormat::kV4Fp8;
  r.b = 3;
  r.s_q = 8;
  r.h_q = 16;
  r.topk = 128;
  r.topk_length_per_token = true;
  r.extra_cache = true;
  r.extra_topk = 200;
  r.extra_page_block_size = 64;
  r.extra_topk_length_per_token = true;
  r.seed = 32;
  expect_cpu_matches_reference(r);
}

// Draft tokens sharing 50-90 % of their request's indices (recipe shared_indices), every format
// with its extra cache where it has one: the lists overlap as MTP verification's do.
TEST(CpuDecode, DraftTokensShareIndices) {
  for (KvCacheFormat f : {KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8, KvCacheFormat::kBf16,
                          KvCacheFormat::kV41Fp8}) {
    for (double shared : {0.5, 0.9}) {
      DecodeRecipe r;
      r.format = f;
      r.b = 3;
      r.s_q = 4;
      r.h_q = 16;
      r.topk = 96;
      r.topk_length_per_token = true;
      r.extra_cache = f != KvCacheFormat::kV32Fp8 && f != KvCacheFormat::kBf16;
      if (f == KvCacheFormat::kV41Fp8) r.extra_format = KvCacheFormat::kV41Fp4;
      r.extra_topk = 64;
      r.extra_page_block_size = 16;
      r.shared_indices = shared;
      r.seed = 34;
      SCOPED_TRACE(std::string(kv_cache_format_name(f)) + " shared " + std::to_string(shared));
      expect_cpu_matches_reference(r);
    }
  }
}

TEST(CpuDecode, CacheSmallerThanTopk) {
  DecodeRecipe r;
  r.topk = 100;
  r.page_block_size = 2;
  r.num_blocks = 3;  // 6 slots
  r.extra_cache = true;
  r.extra_topk = 50;
  r.extra_page_block_size = 1;
  r.extra_num_blocks = 4;
  r.h_q = 12;
  r.seed = 33;
  expect_cpu_matches_reference(r);
}

TEST(CpuDecode, OptionalInputsOff) {
  DecodeRecipe r;
  r.topk_length = false;
  r.attn_sink = false;
  r.invalid_indices = false;
  r.empty_queries = false;
  r.padded_strides = false;
  r.softmax_scale = 0.125f;
  r.h_q = 7;
  r.topk = 150;
  r.seed = 34;
  expect_cpu_matches_reference(r);
}

TEST(CpuDecode, EmptyQueriesWithoutInvalidIndices) {
  // Empty queries then come from topk_length 0 alone (and zero-length requests).
  DecodeRecipe r;
  r.b = 40;
  r.invalid_indices = false;
  r.h_q = 4;
  r.topk = 9;
  r.seed = 35;
  DecodeCase c;
  ASSERT_TRUE(verify::make_decode_case(r, &c).ok());
  DecodeOutputs expected, got;
  ASSERT_TRUE(verify::run_reference(c, &expected).ok());
  ASSERT_TRUE(verify::run_host(c, backend_options(Backend::kCpu), &got).ok());
  EXPECT_TRUE(verify::check_decode(got, expected).ok);
  int64_t lonely = 0;
  for (float l : expected.lse) lonely += l == kInf;
  EXPECT_GT(lonely, 0);
}

TEST(CpuDecode, ResultDoesNotDependOnThreadCount) {
  DecodeRecipe r;
  r.b = 1;  // one query: heads are split across workers
  r.h_q = 128;
  r.topk = 200;
  r.extra_cache = true;
  r.seed = 36;
  DecodeCase c;
  ASSERT_TRUE(verify::make_decode_case(r, &c).ok());
  DecodeOutputs one;
  ASSERT_TRUE(verify::run_host(c, backend_options(Backend::kCpu, 1), &one).ok());
  for (int threads : {2, 5, 16}) {
    DecodeOutputs many;
    ASSERT_TRUE(verify::run_host(c, backend_options(Backend::kCpu, threads), &many).ok());
    EXPECT_EQ(0, std::memcmp(one.out.data(), many.out.data(), one.out.size() * 2)) << threads;
    EXPECT_EQ(0, std::memcmp(one.lse.data(), many.lse.data(), one.lse.size() * 4)) << threads;
  }
}

TEST(CpuDecode, PlanNeedsNoWorkspace) {
  DecodeRecipe r;
  DecodeCase c;
  ASSERT_TRUE(verify::make_decode_case(r, &c).ok());
  for (Backend backend : {Backend::kCpu, Backend::kReference}) {
    DecodePlan plan;
    ASSERT_TRUE(plan_sparse_decode(c.problem, &plan, backend_options(backend, 3)).ok());
    EXPECT_EQ(plan.workspace_bytes, 0u);
    EXPECT_FALSE(plan.reason.empty());
    if (backend == Backend::kCpu) {
      EXPECT_EQ(plan.kernel, "cpu_sparse_decode");
      EXPECT_EQ(plan.num_sm_parts, 3);
    } else {
      EXPECT_EQ(plan.kernel, "reference_sparse_decode");
    }
  }
}

}  // namespace
}  // namespace sparse_mla
