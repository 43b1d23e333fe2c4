// GPU tests of the portable sparse prefill kernel (Backend::kCuda) against the CPU reference on
// the SPEC §5 recipe: both d_qk, h_q 1..128 (every head tile and partial head groups), topk not a
// multiple of 64, s_kv < topk, every invalid-index kind, empty queries, topk_length, sinks
// (finite, -inf, +inf), padded input and output strides, and s_q = 70000 (1-D grid).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "sparse_mla/sparse_mla.h"
#include "verify/check.h"
#include "verify/recipe.h"

namespace sparse_mla {
namespace {

using test_support::kGpu;

// Device copies of host output vectors with the host views' strides (padding NaN included), so
// that downloading the vectors back makes the host views show what the kernel wrote.
struct DeviceMirror {
  Buffer buffer;
  TensorView view;
};

template <typename T>
Status mirror(const std::vector<T>& host, const TensorView& host_view, DeviceMirror* out) {
  SMLA_RETURN_IF_ERROR(test_support::to_device(host, &out->buffer));
  out->view = host_view;
  const auto offset =
      static_cast<const char*>(host_view.data) - reinterpret_cast<const char*>(host.data());
  out->view.data = static_cast<char*>(out->buffer.data()) + offset;
  out->view.device = kGpu;
  return {};
}

template <typename T>
Status fetch(const DeviceMirror& d, std::vector<T>* host) {
  return copy_bytes(host->data(), Device::cpu(), d.buffer.data(), kGpu, host->size() * sizeof(T));
}

std::string describe(const verify::PrefillRecipe& r) {
  return "s_q " + std::to_string(r.s_q) + " s_kv " + std::to_string(r.s_kv) + " h_q " +
         std::to_string(r.h_q) + " d_qk " + std::to_string(r.d_qk) + " topk " +
         std::to_string(r.topk) + (r.attn_sink ? " sink" : "") +
         (r.topk_length ? " topk_length" : "") + (r.padded_strides ? " padded" : "");
}

// edit, where given, may shorten the case's topk_length entries before it is uploaded (rows past
// a shortened list are still in the case, so nothing poisoned is read; the reference reads the
// edited lengths).
void check_case(const verify::PrefillRecipe& recipe,
                const std::function<void(verify::PrefillCase*)>& edit = {}) {
  SCOPED_TRACE(describe(recipe));
  verify::PrefillCase c;
  SMLA_ASSERT_OK(verify::make_prefill_case(recipe, &c));
  if (edit) edit(&c);
  verify::DevicePrefillInputs inputs;
  SMLA_ASSERT_OK(verify::upload(c, kGpu, &inputs));

  verify::PrefillOutputs got;
  verify::allocate_outputs(c.problem, &got, recipe.padded_strides);
  DeviceMirror out, max_logits, lse;
  SMLA_ASSERT_OK(mirror(got.out, got.out_view, &out));
  SMLA_ASSERT_OK(mirror(got.max_logits, got.max_logits_view, &max_logits));
  SMLA_ASSERT_OK(mirror(got.lse, got.lse_view, &lse));
  SparsePrefillArgs args = inputs.args_template;
  args.out = out.view;
  args.max_logits = max_logits.view;
  args.lse = lse.view;

  RunOptions options;
  options.backend = Backend::kCuda;
  SMLA_ASSERT_OK(sparse_prefill(args, options));
  SMLA_ASSERT_OK(synchronize(kGpu));
  SMLA_ASSERT_OK(fetch(out, &got.out));
  SMLA_ASSERT_OK(fetch(max_logits, &got.max_logits));
  SMLA_ASSERT_OK(fetch(lse, &got.lse));

  verify::PrefillOutputs expected;
  SMLA_ASSERT_OK(verify::run_reference(c, &expected));
  const verify::CheckReport report = verify::check_prefill(got, expected);
  EXPECT_TRUE(report.ok) << report.message;
}

struct Shape {
  int64_t s_q, s_kv, h_q, topk;

  // The recipe of this shape at d_qk; features as the recipe's defaults.
  verify::PrefillRecipe recipe(int d_qk, uint64_t seed) const {
    verify::PrefillRecipe r;
    r.d_qk = d_qk;
    r.s_q = s_q;
    r.s_kv = s_kv;
    r.h_q = h_q;
    r.topk = topk;
    r.seed = seed;
    return r;
  }
};

class PortablePrefill : public ::testing::TestWithParam<int> {};  // param: d_qk

// Every head tile (16 / 32 / 64 rows) with full and partial head groups.
TEST_P(PortablePrefill, EveryHeadCount) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {1, 8, 16, 24, 32, 48, 64, 100, 128}) {
    // topk 100 is not a multiple of 64: a partial second block.
    check_case(Shape{5, 300, h_q, 100}.recipe(GetParam(), 100 + h_q));
  }
}

// topk 1 / 37 / 64 / 200, s_kv below topk, and each optional feature switched off.
TEST_P(PortablePrefill, TopkAndFeatures) {
  SMLA_SKIP_WITHOUT_GPU();
  for (Shape s :
       {Shape{6, 40, 16, 1}, Shape{6, 40, 64, 37}, Shape{7, 50, 128, 200}, Shape{4, 512, 32, 64}}) {
    for (int variant = 0; variant < 3; ++variant) {
      verify::PrefillRecipe r = s.recipe(GetParam(), 7 * s.topk + variant);
      r.attn_sink = variant != 1;
      r.topk_length = variant != 2;
      r.padded_strides = variant != 0;
      check_case(r);
    }
  }
}

// Every other token's list empty (topk_length 0) between full ones, one head group per token: a
// CTA of the Hopper prefill's persistent grid walks many items, and after an item without pairs
// one consumer warpgroup runs ahead into the next item's epilogue while the other still stores
// the previous item's max_logits from what its peer published (a race that gave 6 of 896
// max_logits wrong under compute-sanitizer). 96 tokens, s_kv 300, topk 128 (one pair per item);
// run with the grid capped at 3 CTAs (tests/cpp/CMakeLists.txt), each CTA's items alternate.
TEST_P(PortablePrefill, EmptyListsBetweenFullOnes) {
  SMLA_SKIP_WITHOUT_GPU();
  // 64 heads; 16 heads at topk 256 (two block pairs a token: the heads-in-N prefill's items).
  for (int variant = 0; variant < 3; ++variant) {
    const Shape shape = variant < 2 ? Shape{96, 300, 64, 128} : Shape{96, 300, 16, 256};
    verify::PrefillRecipe r = shape.recipe(GetParam(), 9600 + variant);
    r.topk_length = true;
    r.empty_queries = false;
    r.attn_sink = variant == 1;
    check_case(r, [](verify::PrefillCase* c) {
      const int64_t stride = c->topk_length.size() / c->recipe.s_q;
      for (int64_t i = 1; i < c->recipe.s_q; i += 2) c->topk_length[i * stride] = 0;
    });
  }
}

// Long index lists on the 64-row tile: 5 (odd) and 8 (even, the last one partial) blocks of 64,
// so a CTA runs several double-buffer rounds and index fetches made inside its block loop (the
// other cases stop at 4 blocks); topk_length shortens some tokens' lists further. The same lists
// at 16 and 32 heads: several block pairs a token for the kernels with the heads in N (a running
// max and sums carried over blocks, an odd count's last block all invalid).
TEST_P(PortablePrefill, LongListsWideTile) {
  SMLA_SKIP_WITHOUT_GPU();
  for (Shape s : {Shape{4, 700, 64, 300}, Shape{3, 600, 128, 449}, Shape{4, 700, 16, 300},
                  Shape{3, 600, 32, 449}}) {
    for (int variant = 0; variant < 2; ++variant) {
      verify::PrefillRecipe r = s.recipe(GetParam(), 11 * s.topk + variant);
      r.attn_sink = variant == 1;
      r.topk_length = variant == 1;
      check_case(r);
    }
  }
}

// Many query tokens: the 1-D grid (token x head group on blockIdx.x) beyond 65535.
TEST_P(PortablePrefill, SeventyThousandQueries) {
  SMLA_SKIP_WITHOUT_GPU();
  check_case(Shape{70000, 48, 2, 8}.recipe(GetParam(), 70000));
}

// No KV rows at all (s_kv = 0, kv.data null): every slot is invalid, nothing may be read or
// named by a copy; each head gets out 0, lse +inf and max_logits -inf.
TEST_P(PortablePrefill, EmptyKvTensor) {
  SMLA_SKIP_WITHOUT_GPU();
  const int64_t s_q = 3, h_q = 16, d_qk = GetParam(), topk = 70;
  std::vector<uint16_t> q_host(s_q * h_q * d_qk, 0x3f80);  // bf16 1.0
  std::vector<int32_t> indices_host(s_q * topk);
  for (size_t i = 0; i < indices_host.size(); ++i)
    indices_host[i] = static_cast<int32_t>(i % 3) - 1;
  Buffer q, indices, out, max_logits, lse;
  SMLA_ASSERT_OK(test_support::to_device(q_host, &q));
  SMLA_ASSERT_OK(test_support::to_device(indices_host, &indices));
  SMLA_ASSERT_OK(test_support::to_device(std::vector<uint16_t>(s_q * h_q * 512, 0x7fc0), &out));
  SMLA_ASSERT_OK(test_support::to_device(std::vector<float>(s_q * h_q, 1.0f), &max_logits));
  SMLA_ASSERT_OK(test_support::to_device(std::vector<float>(s_q * h_q, 1.0f), &lse));
  SparsePrefillArgs args;
  args.q = TensorView::contiguous(q.data(), DType::kBFloat16, {s_q, h_q, d_qk}, kGpu);
  args.kv = TensorView::contiguous(nullptr, DType::kBFloat16, {0, 1, d_qk}, kGpu);
  args.indices = TensorView::contiguous(indices.data(), DType::kInt32, {s_q, 1, topk}, kGpu);
  args.sm_scale = 0.1f;
  args.out = TensorView::contiguous(out.data(), DType::kBFloat16, {s_q, h_q, 512}, kGpu);
  args.max_logits = TensorView::contiguous(max_logits.data(), DType::kFloat32, {s_q, h_q}, kGpu);
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {s_q, h_q}, kGpu);
  RunOptions options;
  options.backend = Backend::kCuda;
  SMLA_ASSERT_OK(sparse_prefill(args, options));
  std::vector<uint16_t> out_host;
  std::vector<float> max_host, lse_host;
  SMLA_ASSERT_OK(test_support::to_host(out.data(), s_q * h_q * 512, &out_host));
  SMLA_ASSERT_OK(test_support::to_host(max_logits.data(), s_q * h_q, &max_host));
  SMLA_ASSERT_OK(test_support::to_host(lse.data(), s_q * h_q, &lse_host));
  for (uint16_t v : out_host) ASSERT_EQ(v, 0u);
  for (float v : max_host) ASSERT_TRUE(std::isinf(v) && v < 0) << v;
  for (float v : lse_host) ASSERT_TRUE(std::isinf(v) && v > 0) << v;
}

// A KV tensor past 2^31 bytes (2,200,000 rows of d_qk bf16, padded: about 2.1-2.4 GiB): row
// offsets index * kv_stride must be 64-bit; most indexed rows live past the 2 GiB mark.
TEST_P(PortablePrefill, KvBeyondTwoGigabytes) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {16, 128})
    check_case(Shape{3, 2200000, h_q, 192}.recipe(GetParam(), 31 + h_q));
}

INSTANTIATE_TEST_SUITE_P(DQk, PortablePrefill, ::testing::Values(576, 512),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "d" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace sparse_mla
