// Every back end (reference, CPU and, with a CUDA device, the CUDA kernels) against outputs
// computed by FlashMLA's Hopper kernels (tests/data/golden): prefill out / max_logits / lse and
// decode out / lse, SPEC §5 tolerances. An independent implementation agreeing within tolerance
// pins semantics and byte layouts that our own reference could get wrong in the same way as our
// kernels. The CUDA cases skip without a device.
#include <gtest/gtest.h>

#include <optional>
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

// Where a case's tensors live for a back end: the host for reference and CPU, device copies for
// CUDA (uploaded here, outputs downloaded by fetch()).
class Placement {
 public:
  explicit Placement(Backend backend)
      : device_(backend == Backend::kCuda ? Device{DeviceType::kCuda, 0} : Device::cpu()) {}
  Device device() const { return device_; }
  bool on_host() const { return device_.type == DeviceType::kCpu; }

  // An input tensor at this placement (std::nullopt when the case does not have it).
  std::optional<TensorView> optional_input(const GoldenCase& c, const char* name) {
    if (!c.has(name)) return std::nullopt;
    return input(c, name);
  }
  TensorView input(const GoldenCase& c, const char* name) {
    const test_support::GoldenTensor& t = c.tensor(name);
    TensorView v = t.view();
    v.data = upload(t.bytes.data(), t.bytes.size(), v.data);
    v.device = device_;
    return v;
  }
  KvCacheView cache(const GoldenCase& c, const char* name) {
    KvCacheView v = c.cache(name);
    const test_support::GoldenTensor& t = c.tensor(name);
    v.data = upload(t.bytes.data(), t.bytes.size(), v.data);
    v.device = device_;
    return v;
  }
  // An output array of `count` T at this placement (the host vector itself on the host).
  template <typename T>
  void* output(std::vector<T>& host) {
    if (on_host()) return host.data();
    Buffer& b = buffers_.emplace_back();
    status_ = Buffer::allocate(device_, host.size() * sizeof(T), &b);
    return b.data();
  }
  template <typename T>
  Status fetch(std::vector<T>& host, const void* placed) const {
    if (on_host()) return {};
    return copy_bytes(host.data(), Device::cpu(), placed, device_, host.size() * sizeof(T));
  }
  const Status& status() const { return status_; }

 private:
  void* upload(const void* host, size_t bytes, const void* host_view) {
    if (on_host()) return const_cast<void*>(host_view);
    Buffer& b = buffers_.emplace_back();
    if (status_.ok()) status_ = Buffer::allocate(device_, bytes, &b);
    if (status_.ok()) status_ = copy_bytes(b.data(), device_, host, Device::cpu(), bytes);
    // The view may start inside the bytes (manifest strides): keep its offset.
    return static_cast<char*>(b.data()) +
           (static_cast<const char*>(host_view) - static_cast<const char*>(host));
  }

  Device device_;
  std::vector<Buffer> buffers_;
  Status status_;
};

#define SMLA_SKIP_CUDA_WITHOUT_DEVICE(backend)                          \
  do {                                                                  \
    if ((backend) == Backend::kCuda && !cuda_available()) {             \
      GTEST_SKIP() << "no CUDA device visible (or built without CUDA)"; \
    }                                                                   \
  } while (0)

void expect_close(const verify::CompareResult& r) { EXPECT_TRUE(r.ok) << r.message; }

// (case name, back end)
class GoldenPrefill : public ::testing::TestWithParam<std::tuple<std::string, Backend>> {};

TEST_P(GoldenPrefill, MatchesFlashMla) {
  const auto& [name, backend] = GetParam();
  SMLA_SKIP_CUDA_WITHOUT_DEVICE(backend);
  const GoldenCase c = load_golden_case(name);
  const std::vector<int64_t>& shape = c.tensor("q").shape;  // [s_q, h_q, d_qk]
  const int64_t s_q = shape[0], h_q = shape[1];
  std::vector<uint16_t> out(s_q * h_q * 512);
  std::vector<float> max_logits(s_q * h_q), lse(s_q * h_q);
  Placement at(backend);
  SparsePrefillArgs args;
  args.q = at.input(c, "q");
  args.kv = at.input(c, "kv");
  args.indices = at.input(c, "indices");
  args.sm_scale = static_cast<float>(c.scalar("sm_scale"));
  args.attn_sink = at.optional_input(c, "attn_sink");
  args.topk_length = at.optional_input(c, "topk_length");
  args.out = TensorView::contiguous(at.output(out), DType::kBFloat16, {s_q, h_q, 512}, at.device());
  args.max_logits =
      TensorView::contiguous(at.output(max_logits), DType::kFloat32, {s_q, h_q}, at.device());
  args.lse = TensorView::contiguous(at.output(lse), DType::kFloat32, {s_q, h_q}, at.device());
  ASSERT_TRUE(at.status().ok()) << at.status().message();
  Status s = sparse_prefill(args, backend_options(backend));
  ASSERT_TRUE(s.ok()) << s.message();
  for (Status fetched : {at.fetch(out, args.out.data), at.fetch(max_logits, args.max_logits.data),
                         at.fetch(lse, args.lse.data)}) {
    ASSERT_TRUE(fetched.ok()) << fetched.message();
  }

  expect_close(
      verify::compare_bf16("out", out, c.tensor("out").as<uint16_t>(), verify::kPrefillOut));
  expect_close(verify::compare("max_logits", max_logits, c.tensor("max_logits").as<float>(),
                               verify::kPrefillStats));
  expect_close(verify::compare("lse", lse, c.tensor("lse").as<float>(), verify::kPrefillStats));
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenPrefill,
                         ::testing::Combine(::testing::Values("prefill_d576", "prefill_d512"),
                                            ::testing::Values(Backend::kReference, Backend::kCpu,
                                                              Backend::kCuda)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

class GoldenDecode : public ::testing::TestWithParam<std::tuple<std::string, Backend>> {};

TEST_P(GoldenDecode, MatchesFlashMla) {
  const auto& [name, backend] = GetParam();
  SMLA_SKIP_CUDA_WITHOUT_DEVICE(backend);
  const GoldenCase c = load_golden_case(name);
  const std::vector<int64_t>& shape = c.tensor("q").shape;  // [b, s_q, h_q, d_qk]
  const int64_t b = shape[0], s_q = shape[1], h_q = shape[2];
  std::vector<uint16_t> out(b * s_q * h_q * 512);
  std::vector<float> lse(b * s_q * h_q);
  Placement at(backend);
  SparseDecodeArgs args;
  args.q = at.input(c, "q");
  args.kv_cache = at.cache(c, "kv_cache");
  args.indices = at.input(c, "indices");
  args.attn_sink = at.optional_input(c, "attn_sink");
  args.topk_length = at.optional_input(c, "topk_length");
  if (c.has("extra_kv_cache")) {
    args.extra_kv_cache = at.cache(c, "extra_kv_cache");
    args.extra_indices = at.input(c, "extra_indices");
    args.extra_topk_length = at.optional_input(c, "extra_topk_length");
  }
  args.softmax_scale = static_cast<float>(c.scalar("softmax_scale"));
  args.out =
      TensorView::contiguous(at.output(out), DType::kBFloat16, {b, s_q, h_q, 512}, at.device());
  args.lse = TensorView::contiguous(at.output(lse), DType::kFloat32, {b, s_q, h_q}, at.device());
  ASSERT_TRUE(at.status().ok()) << at.status().message();

  const Status s = verify::plan_and_run_decode(args, backend_options(backend), at.device());
  ASSERT_TRUE(s.ok()) << s.message();
  for (Status fetched : {at.fetch(out, args.out.data), at.fetch(lse, args.lse.data)}) {
    ASSERT_TRUE(fetched.ok()) << fetched.message();
  }

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
                                            ::testing::Values(Backend::kReference, Backend::kCpu,
                                                              Backend::kCuda)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  backend_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace sparse_mla
