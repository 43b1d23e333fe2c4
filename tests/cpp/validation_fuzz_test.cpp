// Randomised bad input (SPEC §6) for sparse_prefill, sparse_decode and the host KV-cache codec.
// Thousands of small valid calls get one to four of their arguments' fields set to extreme values:
// sizes and strides of 0, 2^31, 2^62, INT64_MAX or negative, bad ranks, unknown dtypes, devices
// and formats, null and misaligned pointers, NaN and huge scalars, optional tensors dropped,
// outputs pointed at an input or another output, output strides that make it overlap itself,
// cache views sliced to fewer (or claiming more) tokens per page, consistent sizes near the
// limits; plans get their fields edited after planning, run options get any thread count.
// Every call must then either
// - be rejected with kInvalidArgument or kUnsupported, with a message that starts with the
//   operation's name, and the outputs left as they were; or
// - be accepted by the validation. An accepted call whose tensors all still lie inside the
//   fixture's buffers runs on the CPU back end and must succeed. (One that reaches past them is
//   not run: its view claims memory the caller does not own, which no library can check.)
// Prefill and decode calls are also validated (not run) with every tensor on cuda:0, so the
// CUDA-only checks see the mutations too. The checks are cheap; the test earns its keep under ASan
// + UBSan (`make test-asan`), which turn a signed overflow in the size arithmetic, a read outside a
// buffer or a crash into a failure. It found TensorView::numel() overflowing on sizes like
// [INT64_MAX, 4, 576]. Seeds are fixed: a failure reproduces, and its trace names the trial (seed =
// base + trial) and the mutations.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kv_cache_codec_checks.h"
#include "core/params.h"
#include "core/validate.h"
#include "sparse_mla/sparse_mla.h"
#include "support/cache_formats.h"
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
        -(int64_t{1} << 31), std::numeric_limits<int64_t>::min(), (int64_t{1} << 31) + 1,
        std::numeric_limits<int64_t>::max() - 1, int64_t{1} << 53};
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
    switch (pick(8)) {
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
        c.format = static_cast<KvCacheFormat>(pick(7));  // the five formats and two bad values
        return std::string(name) + ".format";
      case 5:
        c.device = device();
        return std::string(name) + ".device";
      case 6:
        c.layout = static_cast<KvLayout>(pick(4));  // default, both layouts and a bad value
        return std::string(name) + ".layout";
      default: {
        const int64_t shift = pointer_shift();
        c.data = shift < 0 ? nullptr : static_cast<const char*>(c.data) + shift;
        return std::string(name) + ".data";
      }
    }
  }

  // An output pointed at the start of another tensor (an input or an output): aliasing.
  std::string alias(const char* name, TensorView& out, const void* other, const char* other_name) {
    out.data = const_cast<void*>(other);
    return std::string(name) + " aliases " + other_name;
  }

  // An output stride shrunk below what its inner dimensions span: the output overlaps itself.
  std::string overlap(const char* name, TensorView& t) {
    if (t.rank < 2 || t.rank > kMaxRank) return std::string(name) + " (rank mutated: unchanged)";
    const int d = pick(t.rank - 1);
    static constexpr int64_t kStrides[] = {0, 1, 2, 7, 256, 511};
    t.strides[d] = kStrides[pick(std::size(kStrides))];
    return std::string(name) + ".strides[d] shrunk";
  }

  // A cache view with fewer tokens per page than its blocks hold (a slice along the page: not
  // detectable, must stay memory-safe), or more than its stride can hold (refused).
  std::string page_slice(const char* name, KvCacheView& c) {
    if (pick(2) == 0) {
      c.page_block_size = std::max<int64_t>(1, c.page_block_size / 2);
      return std::string(name) + " sliced to fewer tokens per page";
    }
    const int64_t more = 1 + pick(64);  // saturating: an earlier mutation may have set INT64_MAX
    c.page_block_size = c.page_block_size > INT64_MAX - more ? INT64_MAX : c.page_block_size + more;
    return std::string(name) + " claims more tokens per page";
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
  const __int128 one_block =
      kv_cache_min_block_stride(c.format, c.page_block_size, c.d_qk, c.layout);
  return static_cast<__int128>(data - begin) + last_block + one_block <=
         static_cast<__int128>(buffer.bytes);
}

// A rejection as SPEC §6 wants it.
void expect_clear_rejection(const Status& s, const char* op) {
  EXPECT_TRUE(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported)
      << status_code_name(s.code()) << ": " << s.message();
  EXPECT_EQ(s.message().rfind(std::string(op) + ": ", 0), 0u) << s.message();
}

// The same call with every tensor and cache on cuda:0, for validation only (nothing runs): the
// CUDA-only checks (16-byte rows, alignment) see the mutations too.
SparsePrefillArgs on_cuda(SparsePrefillArgs a) {
  for (TensorView* t : {&a.q, &a.kv, &a.indices, &a.out, &a.max_logits, &a.lse}) {
    t->device = Device::cuda(0);
  }
  for (std::optional<TensorView>* t : {&a.attn_sink, &a.topk_length}) {
    if (*t) (*t)->device = Device::cuda(0);
  }
  return a;
}

SparseDecodeArgs on_cuda(SparseDecodeArgs a) {
  for (TensorView* t : {&a.q, &a.indices, &a.out, &a.lse}) t->device = Device::cuda(0);
  for (std::optional<TensorView>* t :
       {&a.topk_length, &a.attn_sink, &a.extra_indices, &a.extra_topk_length}) {
    if (*t) (*t)->device = Device::cuda(0);
  }
  a.kv_cache.device = Device::cuda(0);
  if (a.extra_kv_cache) a.extra_kv_cache->device = Device::cuda(0);
  return a;
}

// Sets `field` and names it, for the mutation menus below.
template <class T, class V>
std::string set(T& field, V value, const char* name) {
  field = static_cast<T>(value);
  return name;
}

// ---- the trial driver ------------------------------------------------------------------------

// One entry of a mutation menu: changes one field of `args` and says which.
template <class Args>
using Mutation = std::string (*)(Mutator&, Args&);

// Counts of one test's trials; at the end, the accepted branch must have been taken.
struct Tally {
  const char* what;
  int accepted = 0, ran = 0;
  ~Tally() {
    std::printf("%s: %d of %d mutated calls accepted, %d run\n", what, accepted, kTrialsPerOp, ran);
    EXPECT_GT(ran, 20) << what << ": the mutations never left a call valid and in bounds";
  }
};

// Runs kTrialsPerOp trials: a fresh fixture, 1..4 random mutations from `menu`, then
// check(fixture, args) under a trace naming the trial and the mutations.
template <class Fixture, class Args, size_t N, class MakeArgs, class Check>
void run_trials(uint64_t seed_base, const Mutation<Args> (&menu)[N], MakeArgs make_args,
                Check check) {
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    Mutator m(seed_base + trial);
    Fixture f;
    Args a = make_args(f, m);
    std::string applied;
    for (int n = 1 + m.pick(4); n > 0; --n) applied += menu[m.pick(N)](m, a) + "; ";
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + applied);
    check(f, a);
  }
}

// ---- prefill ---------------------------------------------------------------------------------

// Sets s_q consistently in every tensor that carries it, or topk: calls that pass the shape
// checks and test the size arithmetic behind them.
std::string consistent_size(Mutator& m, SparsePrefillArgs& a) {
  const int64_t v = m.extreme_int64();
  if (m.pick(2) == 0) {
    a.indices.sizes[2] = v;
    return "topk";
  }
  for (TensorView* t : {&a.q, &a.indices, &a.out, &a.max_logits, &a.lse}) t->sizes[0] = v;
  if (a.topk_length) a.topk_length->sizes[0] = v;
  return "s_q everywhere";
}

constexpr Mutation<SparsePrefillArgs> kPrefillMutations[] = {
    [](Mutator& m, SparsePrefillArgs& a) { return m.view("q", a.q); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.view("kv", a.kv); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.view("indices", a.indices); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.optional_view("attn_sink", a.attn_sink); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.optional_view("topk_length", a.topk_length); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.view("out", a.out); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.view("max_logits", a.max_logits); },
    [](Mutator& m, SparsePrefillArgs& a) { return m.view("lse", a.lse); },
    [](Mutator& m, SparsePrefillArgs& a) { return set(a.sm_scale, m.extreme_float(), "sm_scale"); },
    [](Mutator& m, SparsePrefillArgs& a) { return set(a.d_v, m.extreme_int(), "d_v"); },
    consistent_size,
    [](Mutator& m, SparsePrefillArgs& a) {
      TensorView* outs[] = {&a.out, &a.max_logits, &a.lse};
      const char* names[] = {"out", "max_logits", "lse"};
      const int o = m.pick(3);
      switch (m.pick(5)) {
        case 0:
          return m.alias(names[o], *outs[o], a.q.data, "q");
        case 1:
          return m.alias(names[o], *outs[o], a.kv.data, "kv");
        case 2:
          return m.alias(names[o], *outs[o], a.indices.data, "indices");
        default: {
          const int other = (o + 1 + m.pick(2)) % 3;
          return m.alias(names[o], *outs[o], outs[other]->data, names[other]);
        }
      }
    },
    [](Mutator& m, SparsePrefillArgs& a) {
      return m.pick(2) == 0 ? m.overlap("out", a.out) : m.overlap("lse", a.lse);
    },
};

TEST(ValidationFuzz, PrefillRejectsOrRunsEveryMutation) {
  Tally tally{"prefill"};
  RunOptions options;
  options.backend = Backend::kCpu;
  run_trials<PrefillFixture>(
      0x5eed0000u, kPrefillMutations, [](PrefillFixture& f, Mutator&) { return f.args(); },
      [&](PrefillFixture& f, const SparsePrefillArgs& a) {
        detail::PrefillParams params;
        if (const Status on_gpu = detail::validate_prefill(on_cuda(a), &params); !on_gpu.ok()) {
          expect_clear_rejection(on_gpu, "sparse_prefill");
        }
        Status valid = detail::validate_prefill(a, &params);
        if (valid.ok()) valid = detail::validate_no_aliasing(a);
        if (!valid.ok()) {
          expect_clear_rejection(valid, "sparse_prefill");
          expect_clear_rejection(sparse_prefill(a, options), "sparse_prefill");
          EXPECT_TRUE(f.outputs_untouched());
          return;
        }
        ++tally.accepted;
        if (!(inside(a.q, buffer_of(f.q)) && inside(a.kv, buffer_of(f.kv)) &&
              inside(a.indices, buffer_of(f.indices)) && inside(a.attn_sink, buffer_of(f.sink)) &&
              inside(a.topk_length, buffer_of(f.lengths)) && inside(a.out, buffer_of(f.out)) &&
              inside(a.max_logits, buffer_of(f.max_logits)) && inside(a.lse, buffer_of(f.lse)) &&
              a.q.device == Device::cpu())) {
          return;
        }
        ++tally.ran;
        const Status s = sparse_prefill(a, options);
        EXPECT_TRUE(s.ok()) << s.message();
      });
}

// ---- decode ----------------------------------------------------------------------------------

constexpr Mutation<SparseDecodeArgs> kDecodeMutations[] = {
    [](Mutator& m, SparseDecodeArgs& a) { return m.view("q", a.q); },
    [](Mutator& m, SparseDecodeArgs& a) { return m.cache("kv_cache", a.kv_cache); },
    [](Mutator& m, SparseDecodeArgs& a) { return m.view("indices", a.indices); },
    [](Mutator& m, SparseDecodeArgs& a) { return m.optional_view("topk_length", a.topk_length); },
    [](Mutator& m, SparseDecodeArgs& a) { return m.optional_view("attn_sink", a.attn_sink); },
    [](Mutator& m, SparseDecodeArgs& a) {
      if (a.extra_kv_cache && m.pick(4) != 0) return m.cache("extra_kv_cache", *a.extra_kv_cache);
      a.extra_kv_cache.reset();
      return std::string("extra_kv_cache dropped");
    },
    [](Mutator& m, SparseDecodeArgs& a) {
      return m.optional_view("extra_indices", a.extra_indices);
    },
    [](Mutator& m, SparseDecodeArgs& a) {
      return m.optional_view("extra_topk_length", a.extra_topk_length);
    },
    [](Mutator& m, SparseDecodeArgs& a) { return m.view("out", a.out); },
    [](Mutator& m, SparseDecodeArgs& a) { return m.view("lse", a.lse); },
    [](Mutator& m, SparseDecodeArgs& a) {
      return set(a.softmax_scale, m.extreme_float(), "softmax_scale");
    },
    [](Mutator& m, SparseDecodeArgs& a) { return set(a.d_v, m.extreme_int(), "d_v"); },
    [](Mutator& m, SparseDecodeArgs& a) {
      TensorView& out = m.pick(2) == 0 ? a.out : a.lse;
      const char* name = &out == &a.out ? "out" : "lse";
      switch (m.pick(5)) {
        case 0:
          return m.alias(name, out, a.q.data, "q");
        case 1:
          return m.alias(name, out, a.kv_cache.data, "kv_cache");
        case 2:
          return m.alias(name, out, a.indices.data, "indices");
        case 3:
          if (a.extra_kv_cache) return m.alias(name, out, a.extra_kv_cache->data, "extra_kv_cache");
          [[fallthrough]];
        default:
          return &out == &a.out ? m.alias("out", a.out, a.lse.data, "lse")
                                : m.alias("lse", a.lse, a.out.data, "out");
      }
    },
    [](Mutator& m, SparseDecodeArgs& a) {
      return m.pick(2) == 0 ? m.overlap("out", a.out) : m.overlap("lse", a.lse);
    },
    [](Mutator& m, SparseDecodeArgs& a) {
      if (a.extra_kv_cache && m.pick(2) == 0) {
        return m.page_slice("extra_kv_cache", *a.extra_kv_cache);
      }
      return m.page_slice("kv_cache", a.kv_cache);
    },
    [](Mutator& m, SparseDecodeArgs& a) {  // consistent sizes near the limits
      const int64_t v = m.extreme_int64();
      const int dim = m.pick(2);  // b or s_q in every tensor that has it
      for (TensorView* t : {&a.q, &a.indices, &a.out, &a.lse}) t->sizes[dim] = v;
      if (a.extra_indices) a.extra_indices->sizes[dim] = v;
      return std::string(dim == 0 ? "b" : "s_q") + " everywhere";
    },
};

TEST(ValidationFuzz, DecodeRejectsOrRunsEveryMutation) {
  Tally tally{"decode"};
  RunOptions options;
  options.backend = Backend::kCpu;
  run_trials<DecodeFixture>(
      0xdec0000u, kDecodeMutations, [](DecodeFixture& f, Mutator&) { return f.args(); },
      [&](DecodeFixture& f, const SparseDecodeArgs& a) {
        detail::DecodeParams params;
        if (const Status on_gpu = detail::validate_decode(on_cuda(a), &params); !on_gpu.ok()) {
          expect_clear_rejection(on_gpu, "sparse_decode");
        }
        const Status valid = detail::validate_decode(a, &params);
        SparseDecodeProblem problem;
        if (!valid.ok()) {
          expect_clear_rejection(valid, "sparse_decode");
          const Status described = describe_sparse_decode(a, &problem);
          EXPECT_EQ(described.code(), StatusCode::kInvalidArgument) << described.message();
          EXPECT_TRUE(f.outputs_untouched());
          return;
        }
        if (const Status aliased = detail::validate_no_aliasing(a); !aliased.ok()) {
          // Shapes are fine (describe accepts them); the call that writes refuses, once the
          // problem is one planning accepts (a topk past int32 is refused there first).
          expect_clear_rejection(aliased, "sparse_decode");
          ASSERT_TRUE(describe_sparse_decode(a, &problem).ok());
          DecodePlan plan;
          const Status planned = plan_sparse_decode(problem, &plan, options);
          if (!planned.ok()) {
            expect_clear_rejection(planned, "plan_sparse_decode");
            return;
          }
          std::vector<uint8_t> workspace(plan.workspace_bytes + 16);
          EXPECT_EQ(sparse_decode(a, plan, workspace.data(), workspace.size(),
                                  DecodeSchedule::kBuild, options)
                        .message(),
                    aliased.message());
          EXPECT_TRUE(f.outputs_untouched());
          return;
        }
        ++tally.accepted;
        if (!(inside(a.q, buffer_of(f.q)) && inside(a.kv_cache, buffer_of(f.cache)) &&
              inside(a.indices, buffer_of(f.indices)) &&
              inside(a.topk_length, buffer_of(f.lengths)) &&
              inside(a.attn_sink, buffer_of(f.sink)) &&
              (!a.extra_kv_cache || inside(*a.extra_kv_cache, buffer_of(f.extra_cache))) &&
              inside(a.extra_indices, buffer_of(f.extra_indices)) &&
              inside(a.extra_topk_length, buffer_of(f.extra_lengths)) &&
              inside(a.out, buffer_of(f.out)) && inside(a.lse, buffer_of(f.lse)) &&
              a.q.device == Device::cpu())) {
          return;
        }
        ++tally.ran;
        ASSERT_TRUE(describe_sparse_decode(a, &problem).ok());
        DecodePlan plan;
        const Status planned = plan_sparse_decode(problem, &plan, options);
        ASSERT_TRUE(planned.ok()) << planned.message();
        std::vector<uint8_t> workspace(plan.workspace_bytes + 16);
        const Status s = sparse_decode(a, plan, workspace.data(), workspace.size(),
                                       DecodeSchedule::kBuild, options);
        EXPECT_TRUE(s.ok()) << s.message();
      });
}

// ---- decode planning from a hand-made problem --------------------------------------------------

// A hand-made problem and the options it is planned with.
struct PlanCall {
  SparseDecodeProblem problem;
  RunOptions options;
};

struct PlanFixture {
  PlanCall call;
  PlanFixture() {
    DecodeFixture f;
    EXPECT_TRUE(describe_sparse_decode(f.args(), &call.problem).ok());
    call.options.backend = Backend::kCpu;
  }
};

constexpr Mutation<PlanCall> kPlanMutations[] = {
    [](Mutator& m, PlanCall& c) { return set(c.problem.b, m.extreme_int64(), "b"); },
    [](Mutator& m, PlanCall& c) { return set(c.problem.s_q, m.extreme_int64(), "s_q"); },
    [](Mutator& m, PlanCall& c) { return set(c.problem.h_q, m.extreme_int64(), "h_q"); },
    [](Mutator& m, PlanCall& c) { return set(c.problem.d_qk, m.extreme_int(), "d_qk"); },
    [](Mutator& m, PlanCall& c) { return set(c.problem.d_v, m.extreme_int(), "d_v"); },
    [](Mutator& m, PlanCall& c) { return set(c.problem.topk, m.extreme_int64(), "topk"); },
    [](Mutator& m, PlanCall& c) { return set(c.problem.format, m.pick(5), "format"); },
    [](Mutator& m, PlanCall& c) {
      return set(c.problem.page_block_size, m.extreme_int64(), "page_block_size");
    },
    [](Mutator&, PlanCall& c) { return set(c.problem.has_extra, !c.problem.has_extra, "extra"); },
    [](Mutator& m, PlanCall& c) {
      return set(c.problem.extra_topk, m.extreme_int64(), "extra_topk");
    },
    [](Mutator& m, PlanCall& c) {
      return set(c.problem.extra_page_block_size, m.extreme_int64(), "extra_page_block_size");
    },
    [](Mutator& m, PlanCall& c) { return set(c.problem.device, m.device(), "device"); },
    [](Mutator& m, PlanCall& c) { return set(c.options.backend, m.pick(6), "options.backend"); },
    [](Mutator& m, PlanCall& c) {
      return set(c.options.num_threads, m.extreme_int(), "options.num_threads");
    },
};

TEST(ValidationFuzz, PlanRejectsOrPlansEveryProblem) {
  Tally tally{"plan"};
  run_trials<PlanFixture>(
      0x91a40000u, kPlanMutations, [](PlanFixture& f, Mutator&) { return f.call; },
      [&](PlanFixture&, const PlanCall& c) {
        DecodePlan plan;
        const Status s = plan_sparse_decode(c.problem, &plan, c.options);
        if (!s.ok()) {
          expect_clear_rejection(s, "plan_sparse_decode");
          return;
        }
        ++tally.accepted;
        ++tally.ran;
        EXPECT_EQ(plan.problem, c.problem);
      });
}

// ---- plans edited after planning ---------------------------------------------------------------

// A valid call, planned; the trial then edits the plan.
struct EditedPlan {
  DecodePlan plan;
};

constexpr Mutation<EditedPlan> kPlanEdits[] = {
    [](Mutator& m, EditedPlan& e) {
      return set(e.plan.num_sm_parts, m.extreme_int(), "num_sm_parts");
    },
    [](Mutator& m, EditedPlan& e) {
      return set(e.plan.workspace_bytes, m.extreme_int64(), "workspace_bytes");
    },
    [](Mutator& m, EditedPlan& e) {
      static const char* kNames[] = {"cpu_sparse_prefill", "reference_sparse_decode", "",
                                     "portable_sparse_decode_v4fp8", "no such kernel"};
      return set(e.plan.kernel, std::string(kNames[m.pick(std::size(kNames))]), "kernel");
    },
    [](Mutator& m, EditedPlan& e) { return set(e.plan.backend, m.pick(6), "backend"); },
    [](Mutator& m, EditedPlan& e) { return set(e.plan.problem.topk, m.extreme_int64(), "topk"); },
    [](Mutator& m, EditedPlan& e) {
      return set(e.plan.fingerprint, m.extreme_int64(), "fingerprint");
    },
    [](Mutator&, EditedPlan& e) {
      return set(e.plan.index_union, !e.plan.index_union, "index_union");
    },
    [](Mutator&, EditedPlan& e) { return set(e.plan.reason, std::string("edited"), "reason"); },
};

TEST(ValidationFuzz, EditedPlansAreRefused) {
  int refused = 0;
  for (int trial = 0; trial < kTrialsPerOp; ++trial) {
    Mutator m(0xed170000u + trial);
    DecodeFixture f;
    const SparseDecodeArgs a = f.args();
    RunOptions options;
    options.backend = m.pick(2) == 0 ? Backend::kCpu : Backend::kReference;
    SparseDecodeProblem problem;
    ASSERT_TRUE(describe_sparse_decode(a, &problem).ok());
    EditedPlan e;
    ASSERT_TRUE(plan_sparse_decode(problem, &e.plan, options).ok());
    const DecodePlan planned = e.plan;
    std::string applied;
    for (int n = 1 + m.pick(3); n > 0; --n)
      applied += kPlanEdits[m.pick(std::size(kPlanEdits))](m, e) + "; ";
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + applied);
    std::vector<uint8_t> workspace(planned.workspace_bytes + 16);
    const Status s = sparse_decode(a, e.plan, workspace.data(), workspace.size(),
                                   DecodeSchedule::kBuild, options);
    const bool unchanged =
        e.plan.problem == planned.problem && e.plan.backend == planned.backend &&
        e.plan.kernel == planned.kernel && e.plan.num_sm_parts == planned.num_sm_parts &&
        e.plan.workspace_bytes == planned.workspace_bytes &&
        e.plan.index_union == planned.index_union && e.plan.fingerprint == planned.fingerprint;
    if (unchanged) {  // only `reason` edited, or a field set to its own value
      EXPECT_TRUE(s.ok()) << s.message();
      continue;
    }
    ++refused;
    expect_clear_rejection(s, "sparse_decode");
    EXPECT_TRUE(f.outputs_untouched());
  }
  EXPECT_GT(refused, kTrialsPerOp / 2);
}

// ---- run options -----------------------------------------------------------------------------

TEST(ValidationFuzz, ThreadCountsAreRefusedOrRun) {
  Mutator m(0x74eadu);
  for (int trial = 0; trial < 200; ++trial) {
    PrefillFixture f;
    RunOptions options;
    options.backend = Backend::kCpu;
    options.num_threads = trial == 0 ? -5 : m.extreme_int();
    SCOPED_TRACE("num_threads = " + std::to_string(options.num_threads));
    const Status s = sparse_prefill(f.args(), options);
    if (options.num_threads < 0) {
      expect_clear_rejection(s, "sparse_prefill");
      EXPECT_NE(s.message().find("options.num_threads"), std::string::npos) << s.message();
      EXPECT_TRUE(f.outputs_untouched());
    } else {
      EXPECT_TRUE(s.ok()) << s.message();
    }
  }
}

// ---- the KV-cache codec and cache writer
// ---------------------------------------------------------

// Buffers for a small cache of any format and layout (2 blocks of 3 tokens), its bf16 rows, an
// fp32 output and a slot mapping; the call picks the format and the operation.
struct CodecFixture {
  static constexpr int64_t kBlocks = 2, kPage = 3, kMaxDqk = 576, kRows = kBlocks * kPage;
  static int64_t max_block_stride() {
    int64_t stride = 0;
    for (const auto& f : test_support::kAllCacheFormats) {
      for (KvLayout layout : {KvLayout::kPageSplit, KvLayout::kTokenInterleaved}) {
        stride = std::max(stride, kv_cache_min_block_stride(f.format, kPage, kMaxDqk, layout));
      }
    }
    return stride;
  }
  std::vector<uint8_t> cache = std::vector<uint8_t>(max_block_stride() * kBlocks + 16, 0);
  std::vector<uint16_t> rows = std::vector<uint16_t>(kRows * kMaxDqk, 0x3f80);
  std::vector<float> out = std::vector<float>(kRows * kMaxDqk, 0.0f);
  std::vector<int32_t> slots = {5, -1, 0, 3, INT32_MIN, 2};

  void* cache_data() {  // 16-byte aligned, as the formats' block alignment asks
    auto p = reinterpret_cast<uintptr_t>(cache.data());
    return reinterpret_cast<void*>((p + 15) / 16 * 16);
  }
};

enum class CodecOp { kQuantize, kDequantize, kWrite };

struct CodecCall {
  CodecOp op;
  KvCacheView cache;
  TensorView rows;          // quantize_kv_cache's input
  TensorView out;           // dequantize_kv_cache's output
  TensorView write_rows;    // write_kv_cache's rows [n, d_qk]
  TensorView slot_mapping;  // write_kv_cache's slots [n]
};

CodecCall make_codec_call(CodecFixture& f, Mutator& m) {
  const auto& format =
      test_support::kAllCacheFormats[m.pick(std::size(test_support::kAllCacheFormats))];
  const int64_t d_qk = format.d_qk;
  const int64_t stride =
      kv_cache_min_block_stride(format.format, f.kPage, format.d_qk, format.layout);
  KvCacheView cache{f.cache_data(), format.format, f.kBlocks,     f.kPage,
                    stride,         format.d_qk,   Device::cpu(), format.layout};
  return {static_cast<CodecOp>(m.pick(3)),
          cache,
          TensorView::contiguous(f.rows.data(), DType::kBFloat16, {f.kBlocks, f.kPage, 1, d_qk}),
          TensorView::contiguous(f.out.data(), DType::kFloat32, {f.kBlocks, f.kPage, 1, d_qk}),
          TensorView::contiguous(f.rows.data(), DType::kBFloat16, {f.kRows, d_qk}),
          TensorView::contiguous(f.slots.data(), DType::kInt32, {f.kRows})};
}

constexpr Mutation<CodecCall> kCodecMutations[] = {
    [](Mutator& m, CodecCall& c) { return m.cache("cache", c.cache); },
    [](Mutator& m, CodecCall& c) { return m.view("kv_bf16", c.rows); },
    [](Mutator& m, CodecCall& c) { return m.view("kv_out", c.out); },
    [](Mutator& m, CodecCall& c) { return m.view("rows", c.write_rows); },
    [](Mutator& m, CodecCall& c) { return m.view("slot_mapping", c.slot_mapping); },
};

const char* codec_op_name(CodecOp op) {
  return op == CodecOp::kQuantize     ? "quantize_kv_cache"
         : op == CodecOp::kDequantize ? "dequantize_kv_cache"
                                      : "write_kv_cache";
}

TEST(ValidationFuzz, CodecRejectsOrRunsEveryMutation) {
  Tally tally{"codec"};
  run_trials<CodecFixture>(
      0xc0dec000u, kCodecMutations, make_codec_call, [&](CodecFixture& f, const CodecCall& c) {
        const char* op = codec_op_name(c.op);
        auto call = [&] {
          switch (c.op) {
            case CodecOp::kQuantize:
              return quantize_kv_cache(c.rows, c.cache);
            case CodecOp::kDequantize:
              return dequantize_kv_cache(c.cache, c.out);
            default:
              return write_kv_cache(c.write_rows, c.slot_mapping, c.cache);
          }
        };
        const Status valid = c.op == CodecOp::kQuantize
                                 ? detail::check_quantize_args(c.rows, c.cache)
                             : c.op == CodecOp::kDequantize
                                 ? detail::check_dequantize_args(c.cache, c.out)
                                 : detail::check_write_args(c.write_rows, c.slot_mapping, c.cache);
        if (!valid.ok()) {
          expect_clear_rejection(valid, op);
          EXPECT_EQ(call().message(), valid.message());
          return;
        }
        ++tally.accepted;
        // A device call goes to the CUDA codec (tests/cpp/gpu): here its pointers are host ones.
        if (c.cache.device.is_cuda()) return;
        const bool in_bounds =
            inside(c.cache, {f.cache_data(), f.cache.size() - 15}) &&
            (c.op == CodecOp::kQuantize     ? inside(c.rows, buffer_of(f.rows))
             : c.op == CodecOp::kDequantize ? inside(c.out, buffer_of(f.out))
                                            : inside(c.write_rows, buffer_of(f.rows)) &&
                                                  inside(c.slot_mapping, buffer_of(f.slots)));
        if (!in_bounds) return;
        ++tally.ran;
        const Status s = call();
        if (c.op == CodecOp::kWrite && !s.ok()) {
          // The only rejection left to the writer: a slot past the cache (a sliced mapping or a
          // smaller cache), named with its value.
          expect_clear_rejection(s, op);
          EXPECT_NE(s.message().find("is out of range for a cache of"), std::string::npos)
              << s.message();
          return;
        }
        EXPECT_TRUE(s.ok()) << s.message();
      });
}

}  // namespace
}  // namespace sparse_mla
