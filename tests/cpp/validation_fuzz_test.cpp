// Randomised bad input (SPEC §6) for sparse_prefill, sparse_decode and the host KV-cache codec.
// Thousands of small valid calls get one to four of their arguments' fields set to extreme values:
// sizes and strides of 0, 2^31, 2^62, INT64_MAX or negative, bad ranks, unknown dtypes, devices
// and formats, null and misaligned pointers, NaN and huge scalars, optional tensors dropped.
// Every call must then either
// - be rejected with kInvalidArgument or kUnsupported, with a message that starts with the
//   operation's name, and the outputs left as they were; or
// - be accepted by the validation. An accepted call whose tensors all still lie inside the
//   fixture's buffers runs on the CPU back end and must succeed. (One that reaches past them is
//   not run: its view claims memory the caller does not own, which no library can check.)
// The checks are cheap; the test earns its keep under ASan + UBSan (`make test-asan`), which turn
// a signed overflow in the size arithmetic, a read outside a buffer or a crash into a failure. It
// found TensorView::numel() overflowing on sizes like [INT64_MAX, 4, 576]. Seeds are fixed: a
// failure reproduces, and its trace names the trial (seed = base + trial) and the mutations.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/validate.h"
#include "cpu/kv_cache_codec_checks.h"
#include "sparse_mla/sparse_mla.h"
#include "support/call_fixtures.h"

namespace sparse_mla {
namespace {

using test_support::DecodeFixture;
using test_support::PrefillFixture;

constexpr int kTrialsPerOp = 3000;

// ---- random extreme values -------------------------------------------------------------------

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  int64_t extreme_int64() {
    // clang-format off
    static constexpr int64_t kValues[] = {
        0, 1, 2, 3, 7, 64, 65, 577, (int64_t{1} << 31) - 1, int64_t{1} << 31, int64_t{1} << 32,
        int64_t{1} << 40, int64_t{1} << 62, std::numeric_limits<int64_t>::max(), -1,
        -(int64_t{1} << 31), std::numeric_limits<int64_t>::min()};
    // clang-format on
    return kValues[pick(std::size(kValues))];
  }

  int extreme_int() {
    static constexpr int kValues[] = {-1, 0,   1,   2,   3,   4,       5,
                                      6,  100, 448, 512, 576, INT_MAX, INT_MIN};
    return kValues[pick(std::size(kValues))];
  }

  float extreme_float() {
    using limits = std::numeric_limits<float>;
    static constexpr float kValues[] = {0.0f,
                                        -0.0f,
                                        -1.0f,
                                        1e-30f,
                                        1e30f,
                                        0.04f,
                                        limits::infinity(),
                                        -limits::infinity(),
                                        limits::quiet_NaN(),
                                        limits::denorm_min()};
    return kValues[pick(std::size(kValues))];
  }

  Device device() {
    switch (pick(4)) {
      case 0:
        return Device::cpu();
      case 1:
        return Device::cuda(0);
      case 2:
        return Device::cuda(extreme_int());
      default:
        return Device{static_cast<DeviceType>(2 + pick(3)), 0};
    }
  }

  // A byte offset for a data pointer: misaligned, past a 16-byte boundary, or nullptr (-1).
  int64_t pointer_shift() {
    static constexpr int64_t kShifts[] = {-1, 1, 2, 4, 8, 16};
    return kShifts[pick(std::size(kShifts))];
  }

  // One field of a view: a size, a stride, the rank, the dtype, the device or the data pointer.
  std::string view(const char* name, TensorView& t) {
    const int d = pick(kMaxRank);
    switch (pick(6)) {
      case 0:
        t.sizes[d] = extreme_int64();
        return std::string(name) + ".sizes[d]";
      case 1:
        t.strides[d] = extreme_int64();
        return std::string(name) + ".strides[d]";
      case 2:
        t.rank = extreme_int();
        return std::string(name) + ".rank";
      case 3:
        t.dtype = static_cast<DType>(pick(8));
        return std::string(name) + ".dtype";
      case 4:
        t.device = device();
        return std::string(name) + ".device";
      default: {
        const int64_t shift = pointer_shift();
        t.data = shift < 0 ? nullptr : static_cast<char*>(t.data) + shift;
        return std::string(name) + ".data";
      }
    }
  }

  std::string optional_view(const char* name, std::optional<TensorView>& t) {
    if (!t || pick(4) == 0) {
      t.reset();
      return std::string(name) + " dropped";
    }
    return view(name, *t);
  }

  std::string cache(const char* name, KvCacheView& c) {
    switch (pick(7)) {
      case 0:
        c.num_blocks = extreme_int64();
        return std::string(name) + ".num_blocks";
      case 1:
        c.page_block_size = extreme_int64();
        return std::string(name) + ".page_block_size";
      case 2:
        c.block_stride_bytes = extreme_int64();
        return std::string(name) + ".block_stride_bytes";
      case 3:
        c.d_qk = extreme_int();
        return std::string(name) + ".d_qk";
      case 4:
        c.format = static_cast<KvCacheFormat>(pick(5));
        return std::string(name) + ".format";
      case 5:
        c.device = device();
        return std::string(name) + ".device";
      default: {
        const int64_t shift = pointer_shift();
        c.data = shift < 0 ? nullptr : static_cast<const char*>(c.data) + shift;
        return std::string(name) + ".data";
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// ---- memory the (mutated) arguments claim ------------------------------------------------------

struct Buffer {
  const void* begin;
  size_t bytes;
};

template <class T>
Buffer buffer_of(const std::vector<T>& v) {
  return {v.data(), v.size() * sizeof(T)};
}

// True if every element `t` addresses lies inside `buffer` (128-bit arithmetic: the sizes and
// strides may be anything). An empty view addresses nothing.
bool inside(const TensorView& t, Buffer buffer) {
  if (t.rank < 0 || t.rank > kMaxRank) return false;
  __int128 last = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] == 0) return true;
    if (t.sizes[d] < 0 || t.strides[d] < 0) return false;
    last += static_cast<__int128>(t.sizes[d] - 1) * t.strides[d];
  }
  const size_t element = dtype_size(t.dtype);
  const auto begin = reinterpret_cast<uintptr_t>(buffer.begin);
  const auto data = reinterpret_cast<uintptr_t>(t.data);
  if (element == 0 || t.data == nullptr || data < begin) return false;
  return static_cast<__int128>(data - begin) + (last + 1) * static_cast<__int128>(element) <=
         static_cast<__int128>(buffer.bytes);
}

bool inside(const std::optional<TensorView>& t, Buffer buffer) { return !t || inside(*t, buffer); }

bool inside(const KvCacheView& c, Buffer buffer) {
  if (c.num_blocks <= 0 || c.page_block_size <= 0 || c.block_stride_bytes <= 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(buffer.begin);
  const auto data = reinterpret_cast<uintptr_t>(c.data);
  if (c.data == nullptr || data < begin) return false;
  const __int128 last_block = static_cast<__int128>(c.num_blocks - 1) * c.block_stride_bytes;
  const __int128 one_block = kv_cache_min_block_stride(c.format, c.page_block_size, c.d_qk);
  return static_cast<__int128>(data - begin) + last_block + one_block <=
         static_cast<__int128>(buffer.bytes);
}

// A rejection as SPEC §6 wants it.
void expect_clear_rejection(const Status& s, const char* op) {
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported)
      << status_code_name(s.code()) << ": " << s.message();
  EXPECT_EQ(s.message().rfind(std::string(op) + ": ", 0), 0u) << s.message();
}

// ---- prefill ---------------------------------------------------------------------------------

TEST(ValidationFuzz, PrefillRejectsOrRunsEveryMutation) {
  int accepted = 0, ran = 0;
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    Mutator m(0x5eed0000u + trial);
    PrefillFixture f;
    SparsePrefillArgs a = f.args();
    std::string applied;
    for (int n = 1 + m.pick(4); n > 0; --n) {
      switch (m.pick(11)) {
        case 0:
          applied += m.view("q", a.q);
          break;
        case 1:
          applied += m.view("kv", a.kv);
          break;
        case 2:
          applied += m.view("indices", a.indices);
          break;
        case 3:
          applied += m.optional_view("attn_sink", a.attn_sink);
          break;
        case 4:
          applied += m.optional_view("topk_length", a.topk_length);
          break;
        case 5:
          applied += m.view("out", a.out);
          break;
        case 6:
          applied += m.view("max_logits", a.max_logits);
          break;
        case 7:
          applied += m.view("lse", a.lse);
          break;
        case 8:
          a.sm_scale = m.extreme_float();
          applied += "sm_scale";
          break;
        case 9:
          a.d_v = m.extreme_int();
          applied += "d_v";
          break;
        default: {
          // A consistent change of s_q or topk across every tensor that carries it: calls that
          // pass the shape checks and test the size arithmetic behind them.
          const int64_t v = m.extreme_int64();
          if (m.pick(2) == 0) {
            for (TensorView* t : {&a.q, &a.indices, &a.out, &a.max_logits, &a.lse}) t->sizes[0] = v;
            if (a.topk_length) a.topk_length->sizes[0] = v;
            applied += "s_q everywhere";
          } else {
            a.indices.sizes[2] = v;
            applied += "topk";
          }
        }
      }
      applied += "; ";
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + applied);
    detail::PrefillParams params;
    const Status valid = detail::validate_prefill(a, &params);
    RunOptions options;
    options.backend = Backend::kCpu;
    if (!valid.ok()) {
      expect_clear_rejection(valid, "sparse_prefill");
      expect_clear_rejection(sparse_prefill(a, options), "sparse_prefill");
      EXPECT_TRUE(f.outputs_untouched());
      continue;
    }
    ++accepted;
    const bool safe =
        inside(a.q, buffer_of(f.q)) && inside(a.kv, buffer_of(f.kv)) &&
        inside(a.indices, buffer_of(f.indices)) && inside(a.attn_sink, buffer_of(f.sink)) &&
        inside(a.topk_length, buffer_of(f.lengths)) && inside(a.out, buffer_of(f.out)) &&
        inside(a.max_logits, buffer_of(f.max_logits)) && inside(a.lse, buffer_of(f.lse)) &&
        a.q.device == Device::cpu();
    if (!safe) continue;
    ++ran;
    const Status s = sparse_prefill(a, options);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  std::printf("prefill: %d of %d mutated calls accepted, %d run\n", accepted, kTrialsPerOp, ran);
  // The mutations must leave some calls valid, or the accepted branch is never tested.
  EXPECT_GT(ran, 20) << accepted << " accepted";
}

// ---- decode ----------------------------------------------------------------------------------

TEST(ValidationFuzz, DecodeRejectsOrRunsEveryMutation) {
  int accepted = 0, ran = 0;
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    Mutator m(0xdec0000u + trial);
    DecodeFixture f;
    SparseDecodeArgs a = f.args();
    std::string applied;
    for (int n = 1 + m.pick(4); n > 0; --n) {
      switch (m.pick(12)) {
        case 0:
          applied += m.view("q", a.q);
          break;
        case 1:
          applied += m.cache("kv_cache", a.kv_cache);
          break;
        case 2:
          applied += m.view("indices", a.indices);
          break;
        case 3:
          applied += m.optional_view("topk_length", a.topk_length);
          break;
        case 4:
          applied += m.optional_view("attn_sink", a.attn_sink);
          break;
        case 5:
          if (a.extra_kv_cache && m.pick(4) != 0) {
            applied += m.cache("extra_kv_cache", *a.extra_kv_cache);
          } else {
            a.extra_kv_cache.reset();
            applied += "extra_kv_cache dropped";
          }
          break;
        case 6:
          applied += m.optional_view("extra_indices", a.extra_indices);
          break;
        case 7:
          applied += m.optional_view("extra_topk_length", a.extra_topk_length);
          break;
        case 8:
          applied += m.view("out", a.out);
          break;
        case 9:
          applied += m.view("lse", a.lse);
          break;
        case 10:
          a.softmax_scale = m.extreme_float();
          applied += "softmax_scale";
          break;
        default:
          a.d_v = m.extreme_int();
          applied += "d_v";
          break;
      }
      applied += "; ";
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + applied);
    detail::DecodeParams params;
    const Status valid = detail::validate_decode(a, &params);
    RunOptions options;
    options.backend = Backend::kCpu;
    SparseDecodeProblem problem;
    if (!valid.ok()) {
      expect_clear_rejection(valid, "sparse_decode");
      const Status described = describe_sparse_decode(a, &problem);
      EXPECT_FALSE(described.ok());
      EXPECT_EQ(described.code(), StatusCode::kInvalidArgument) << described.message();
      EXPECT_TRUE(f.outputs_untouched());
      continue;
    }
    ++accepted;
    const bool safe = inside(a.q, buffer_of(f.q)) && inside(a.kv_cache, buffer_of(f.cache)) &&
                      inside(a.indices, buffer_of(f.indices)) &&
                      inside(a.topk_length, buffer_of(f.lengths)) &&
                      inside(a.attn_sink, buffer_of(f.sink)) &&
                      (!a.extra_kv_cache || inside(*a.extra_kv_cache, buffer_of(f.extra_cache))) &&
                      inside(a.extra_indices, buffer_of(f.extra_indices)) &&
                      inside(a.extra_topk_length, buffer_of(f.extra_lengths)) &&
                      inside(a.out, buffer_of(f.out)) && inside(a.lse, buffer_of(f.lse)) &&
                      a.q.device == Device::cpu();
    if (!safe) continue;
    ++ran;
    ASSERT_TRUE(describe_sparse_decode(a, &problem).ok());
    DecodePlan plan;
    const Status planned = plan_sparse_decode(problem, &plan, options);
    ASSERT_TRUE(planned.ok()) << planned.message();
    std::vector<uint8_t> workspace(plan.workspace_bytes + 16);
    const Status s =
        sparse_decode(a, plan, workspace.data(), workspace.size(), DecodeSchedule::kBuild, options);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  std::printf("decode: %d of %d mutated calls accepted, %d run\n", accepted, kTrialsPerOp, ran);
  EXPECT_GT(ran, 20) << accepted << " accepted";
}

// ---- decode planning from a hand-made problem --------------------------------------------------

TEST(ValidationFuzz, PlanRejectsOrPlansEveryProblem) {
  DecodeFixture f;
  SparseDecodeProblem valid;
  ASSERT_TRUE(describe_sparse_decode(f.args(), &valid).ok());
  int planned = 0;
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    Mutator m(0x91a40000u + trial);
    SparseDecodeProblem p = valid;
    RunOptions options;
    options.backend = Backend::kCpu;
    std::string applied;
    for (int n = 1 + m.pick(4); n > 0; --n) {
      switch (m.pick(14)) {
        case 0:
          p.b = m.extreme_int64();
          applied += "b";
          break;
        case 1:
          p.s_q = m.extreme_int64();
          applied += "s_q";
          break;
        case 2:
          p.h_q = m.extreme_int64();
          applied += "h_q";
          break;
        case 3:
          p.d_qk = m.extreme_int();
          applied += "d_qk";
          break;
        case 4:
          p.d_v = m.extreme_int();
          applied += "d_v";
          break;
        case 5:
          p.topk = m.extreme_int64();
          applied += "topk";
          break;
        case 6:
          p.format = static_cast<KvCacheFormat>(m.pick(5));
          applied += "format";
          break;
        case 7:
          p.page_block_size = m.extreme_int64();
          applied += "page_block_size";
          break;
        case 8:
          p.has_extra = !p.has_extra;
          applied += "has_extra";
          break;
        case 9:
          p.extra_topk = m.extreme_int64();
          applied += "extra_topk";
          break;
        case 10:
          p.extra_page_block_size = m.extreme_int64();
          applied += "extra_page_block_size";
          break;
        case 11:
          p.device = m.device();
          applied += "device";
          break;
        case 12:
          options.backend = static_cast<Backend>(m.pick(6));
          applied += "options.backend";
          break;
        default:
          options.num_threads = m.extreme_int();
          applied += "options.num_threads";
          break;
      }
      applied += "; ";
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + applied);
    DecodePlan plan;
    const Status s = plan_sparse_decode(p, &plan, options);
    if (s.ok()) {
      ++planned;
      EXPECT_EQ(plan.problem, p);
    } else {
      expect_clear_rejection(s, "plan_sparse_decode");
    }
  }
  std::printf("plan: %d of %d mutated problems planned\n", planned, kTrialsPerOp);
  EXPECT_GT(planned, 20);
}

// ---- the host KV-cache codec -----------------------------------------------------------------

// A small cache of `format` (2 blocks of 3 tokens) with its bf16 rows and an fp32 output.
struct CodecFixture {
  static constexpr int64_t kBlocks = 2, kPage = 3;
  KvCacheFormat format;
  int d_qk;
  int64_t block_stride;
  std::vector<uint8_t> cache;
  std::vector<uint16_t> rows;
  std::vector<float> out;

  CodecFixture(KvCacheFormat format, int d_qk)
      : format(format),
        d_qk(d_qk),
        block_stride(kv_cache_min_block_stride(format, kPage, d_qk)),
        cache(block_stride * kBlocks + 16, 0),
        rows(kBlocks * kPage * d_qk, 0x3f80),
        out(kBlocks * kPage * d_qk, 0.0f) {}

  void* cache_data() {  // 16-byte aligned, as the formats' block alignment asks
    auto p = reinterpret_cast<uintptr_t>(cache.data());
    return reinterpret_cast<void*>((p + 15) / 16 * 16);
  }
  KvCacheView view() {
    return KvCacheView{cache_data(), format, kBlocks, kPage, block_stride, d_qk, Device::cpu()};
  }
  TensorView rows_view() {
    return TensorView::contiguous(rows.data(), DType::kBFloat16, {kBlocks, kPage, 1, d_qk});
  }
  TensorView out_view() {
    return TensorView::contiguous(out.data(), DType::kFloat32, {kBlocks, kPage, 1, d_qk});
  }
};

TEST(ValidationFuzz, CodecRejectsOrRunsEveryMutation) {
  struct Format {
    KvCacheFormat format;
    int d_qk;
  };
  constexpr Format kFormats[] = {{KvCacheFormat::kV32Fp8, 576},
                                 {KvCacheFormat::kV4Fp8, 512},
                                 {KvCacheFormat::kBf16, 576},
                                 {KvCacheFormat::kBf16, 512}};
  int accepted = 0, ran = 0;
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    Mutator m(0xc0dec000u + trial);
    const Format& f0 = kFormats[m.pick(std::size(kFormats))];
    CodecFixture f(f0.format, f0.d_qk);
    KvCacheView cache = f.view();
    TensorView rows = f.rows_view();
    TensorView out = f.out_view();
    const bool quantize = m.pick(2) == 0;
    std::string applied = quantize ? "quantize: " : "dequantize: ";
    for (int n = 1 + m.pick(3); n > 0; --n) {
      switch (m.pick(3)) {
        case 0:
          applied += m.cache("cache", cache);
          break;
        case 1:
          applied += m.view("kv_bf16", rows);
          break;
        default:
          applied += m.view("kv_out", out);
          break;
      }
      applied += "; ";
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + applied);
    const char* op = quantize ? "quantize_kv_cache" : "dequantize_kv_cache";
    const Status valid =
        quantize ? cpu::check_quantize_args(rows, cache) : cpu::check_dequantize_args(cache, out);
    if (!valid.ok()) {
      expect_clear_rejection(valid, op);
      const Status s = quantize ? quantize_kv_cache(rows, cache) : dequantize_kv_cache(cache, out);
      EXPECT_EQ(s.message(), valid.message());
      continue;
    }
    ++accepted;
    const bool safe = inside(cache, {f.cache_data(), f.cache.size() - 15}) &&
                      (quantize ? inside(rows, buffer_of(f.rows)) : inside(out, buffer_of(f.out)));
    if (!safe) continue;
    ++ran;
    const Status s = quantize ? quantize_kv_cache(rows, cache) : dequantize_kv_cache(cache, out);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  std::printf("codec: %d of %d mutated calls accepted, %d run\n", accepted, kTrialsPerOp, ran);
  EXPECT_GT(ran, 20) << accepted << " accepted";
}

}  // namespace
}  // namespace sparse_mla
