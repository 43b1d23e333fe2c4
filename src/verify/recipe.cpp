// The SPEC §5 test-data recipe (recipe.h): random q/kv, index lists that mix every kind of
// invalid slot, NaN-poisoned unreferenced rows, topk lengths, sinks and padded strides.
// Every random stream is keyed by (seed, tensor, row), so a case is the same whatever the
// thread count, and rows are generated in parallel: the bench sizes (s_q 4096, h_q 128,
// s_kv 131072, topk 2048) take seconds, not minutes.
#include "verify/recipe.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>
#include <optional>
#include <thread>
#include <tuple>

namespace sparse_mla::verify {
namespace {

constexpr uint16_t kBf16NaN = 0x7fc0;
// Row padding of padded layouts: 16 bytes keeps every row as aligned as a contiguous one.
constexpr int64_t kPadBf16 = 8;
constexpr int64_t kPadInt32 = 4;
constexpr int64_t kPadFloat = 4;

// Tensor ids that key the random streams.
enum Stream : uint64_t {
  kQ = 1,
  kKv = 2,
  kExtraKv = 3,
  kLength = 4,
  kExtraLength = 5,
  kIndices = 6,
  kExtraIndices = 7,
  kEmpty = 8,
  kSink = 9,
  kOffsets = 10,
  kShared = 11,
  kRequestLengths = 12,
  kExtraRequestLengths = 13,
  kRequestPages = 14,
  kExtraRequestPages = 15,
};

// splitmix64: tiny state, good enough statistics, and cheap to seed per row.
struct Rng {
  uint64_t state;
  Rng(uint64_t seed, uint64_t tensor, uint64_t row)
      : state(seed * 0x9e3779b97f4a7c15ULL ^ tensor * 0xd1b54a32d192ed03ULL ^
              row * 0x8cb92ba72f3d8dd7ULL) {
    next();
  }
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  int64_t below(int64_t n) {                                                // [0, n), n >= 1
    return static_cast<int64_t>(static_cast<uint64_t>(
        (static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(n)) >> 64));
  }
  // Approximately N(0, 1): the Irwin-Hall sum of four 16-bit uniforms, rescaled (mean 2, variance
  // 1/3). One generator call per value; tails end at +-3.46 sigma, which test data does not miss.
  float normal() {
    uint64_t r = next();
    uint32_t sum = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                   static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    return (static_cast<float>(sum) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }
};

// N(0, 1) by Box-Muller: a request length's spread needs the tails normal() cuts at 3.46 sigma.
double gaussian(Rng& rng) {
  const double u1 = 1.0 - rng.uniform();  // (0, 1]
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Lists of distinct values, drawn with scratch kept between lists: out[0, min(count, n)) distinct
// values of [0, n) in random order, -1 after them up to count.
class DistinctDraw {
 public:
  void operator()(Rng& rng, int64_t count, int64_t n, int32_t* out) {
    const int64_t k = std::min(count, n);
    if (2 * k > n) {  // most of [0, n): a partial Fisher-Yates shuffle
      all_.resize(n);
      std::iota(all_.begin(), all_.end(), 0);
      for (int64_t i = 0; i < k; ++i) {
        std::swap(all_[i], all_[i + rng.below(n - i)]);
        out[i] = all_[i];
      }
    } else {  // a few of many: draw again on a value already drawn (a bitmap, cleared after)
      if (static_cast<int64_t>(seen_.size()) * 64 < n) seen_.assign((n + 63) / 64, 0);
      for (int64_t i = 0; i < k; ++i) {
        int64_t v;
        do {
          v = rng.below(n);
        } while ((seen_[v >> 6] >> (v & 63)) & 1u);
        seen_[v >> 6] |= uint64_t{1} << (v & 63);
        out[i] = static_cast<int32_t>(v);
      }
      for (int64_t i = 0; i < k; ++i) seen_[out[i] >> 6] &= ~(uint64_t{1} << (out[i] & 63));
    }
    std::fill(out + k, out + count, -1);
  }

 private:
  std::vector<uint64_t> seen_;
  std::vector<int32_t> all_;
};

uint16_t to_bf16(float x) {  // round to nearest even; the recipe never makes NaN here
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Runs fn(begin, end) over [0, n) on a few threads (serially when threads are unavailable).
template <typename F>
void parallel_ranges(int64_t n, int64_t min_per_thread, F fn) {
  int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  int64_t threads = std::clamp<int64_t>(n / std::max<int64_t>(min_per_thread, 1), 1, hw);
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  int64_t done_serially_from = n;
  for (int64_t t = 0; t < threads; ++t) {
    int64_t b = n * t / threads, e = n * (t + 1) / threads;
    try {
      pool.emplace_back(fn, b, e);
    } catch (...) {
      done_serially_from = b;
      break;
    }
  }
  if (done_serially_from < n) fn(done_serially_from, n);
  for (auto& th : pool) th.join();
}

// One value of the invalid-index mixture of SPEC §5; `n` = s_kv or the slot count.
int32_t invalid_index(Rng& rng, int64_t n) {
  switch (rng.below(6)) {
    case 0:
      return INT_MIN;
    case 1:
      return -123456;
    case 2:
      return -1;
    case 3:
      return static_cast<int32_t>(std::min<int64_t>(n, INT_MAX));
    case 4:
      return 114514;  // valid when n > 114514: validity is decided by the rule alone
    default:
      return INT_MAX;
  }
}

// Length of one index list as stored in the topk_length tensor: 0, 1, topk or in between, and
// now and then a value outside [0, topk] (negative, INT_MIN, past topk, INT_MAX) that every
// back end must clamp to [0, topk].
int32_t draw_length(Rng& rng, int64_t topk) {
  int64_t u = rng.below(16);
  if (u == 0) return 0;
  if (u == 1) return 1;
  if (u == 15) {
    const int32_t out_of_range[] = {-5, INT_MIN, static_cast<int32_t>(topk) + 7, INT_MAX};
    return out_of_range[rng.below(4)];
  }
  if (u < 6 || topk <= 2) return static_cast<int32_t>(topk);
  return static_cast<int32_t>(2 + rng.below(topk - 2));
}

int32_t clamp_length(int32_t n, int64_t topk) {
  return static_cast<int32_t>(std::clamp<int64_t>(n, 0, topk));
}

// Fills one index list [topk] (first `length` slots attended) for one query.
void fill_list(Rng& rng, int32_t* list, int64_t topk, int64_t length, int64_t n, bool empty,
               bool invalid_indices) {
  for (int64_t k = 0; k < topk; ++k) {
    int32_t v;
    if (k < length) {
      bool invalid = invalid_indices && (empty || rng.below(8) == 0);
      v = invalid ? invalid_index(rng, n) : static_cast<int32_t>(rng.below(n));
    } else {
      // Beyond topk_length: in-range values (must not be read; their rows are poisoned unless
      // another query references them) mixed with invalid ones.
      v = invalid_indices && rng.below(2) == 0 ? invalid_index(rng, n)
                                               : static_cast<int32_t>(rng.below(n));
    }
    list[k] = v;
  }
}

bool valid_index(int32_t idx, int64_t n) { return idx >= 0 && idx < n; }

// Marks the rows an index list really attends; returns the number of valid slots.
int64_t mark_referenced(const int32_t* list, int64_t length, int64_t n,
                        std::vector<uint8_t>* referenced) {
  int64_t valid = 0;
  for (int64_t k = 0; k < length; ++k) {
    if (valid_index(list[k], n)) {
      (*referenced)[list[k]] = 1;
      ++valid;
    }
  }
  return valid;
}

// Fills `row` (d bf16) with randn/10 + offset, optionally clamped to +-1.
void fill_row(uint16_t* row, int64_t d, Rng rng, float offset, bool clamp) {
  for (int64_t j = 0; j < d; ++j) {
    float x = rng.normal() * 0.1f + offset;
    if (clamp) x = std::clamp(x, -1.0f, 1.0f);
    row[j] = to_bf16(x);
  }
}

float tensor_offset(uint64_t seed, uint64_t tensor) {
  Rng rng(seed, kOffsets, tensor);
  return static_cast<float>((rng.uniform() - 0.5) * 0.1);  // in [-0.05, 0.05)
}

// attn_sink [h_q] (stride `stride`): finite mostly, +inf and -inf one head in eight each.
void fill_sinks(uint64_t seed, int64_t h_q, int64_t stride, std::vector<float>* sinks) {
  sinks->assign(h_q * stride, NAN);
  for (int64_t h = 0; h < h_q; ++h) {
    Rng rng(seed, kSink, h);
    int64_t u = rng.below(8);
    (*sinks)[h * stride] = u == 0   ? INFINITY
                           : u == 1 ? -INFINITY
                                    : static_cast<float>(rng.uniform() * 7 - 1);
  }
}

Status check_recipe_dims(const char* what, int64_t s_q, int64_t h_q, int64_t topk) {
  if (s_q < 1 || h_q < 1 || h_q > 128 || topk < 1) {
    return invalid_argument(std::string(what) + ": recipe needs s_q >= 1, 1 <= h_q <= 128, " +
                            "topk >= 1 (got s_q " + std::to_string(s_q) + ", h_q " +
                            std::to_string(h_q) + ", topk " + std::to_string(topk) + ")");
  }
  return {};
}

}  // namespace

// ---- prefill -----------------------------------------------------------------------------

Status make_prefill_case(const PrefillRecipe& r, PrefillCase* c) {
  if (c == nullptr) return invalid_argument("make_prefill_case: out is null");
  SMLA_RETURN_IF_ERROR(check_recipe_dims("make_prefill_case", r.s_q, r.h_q, r.topk));
  if ((r.d_qk != 512 && r.d_qk != 576) || r.s_kv < 1 || r.s_kv > INT_MAX) {
    return invalid_argument(
        "make_prefill_case: recipe needs d_qk 512 or 576 and 1 <= s_kv < 2^31"
        " (got d_qk " +
        std::to_string(r.d_qk) + ", s_kv " + std::to_string(r.s_kv) + ")");
  }
  if (r.distinct_indices && (r.invalid_indices || r.empty_queries)) {
    return invalid_argument(
        "make_prefill_case: distinct_indices needs invalid_indices and empty_queries off");
  }
  *c = PrefillCase{};
  c->recipe = r;
  const int64_t s_q = r.s_q, h_q = r.h_q, d = r.d_qk, topk = r.topk, s_kv = r.s_kv;
  const bool pad = r.padded_strides;
  c->problem =
      SparsePrefillProblem{s_q, s_kv, h_q, d, 512, topk, r.attn_sink, r.topk_length, Device::cpu()};
  c->sm_scale = r.sm_scale > 0 ? r.sm_scale : static_cast<float>(1.0 / std::sqrt(double(d)));

  // indices [s_q, 1, topk] int32, topk_length [s_q] int32
  const int64_t idx_stride = pad ? round_up(topk, kPadInt32) + kPadInt32 : topk;
  const int64_t len_stride = pad ? 2 : 1;
  c->indices.assign(s_q * idx_stride, 0);
  std::vector<int32_t> lengths(s_q, static_cast<int32_t>(topk));
  for (int64_t i = 0; i < s_q; ++i) {
    Rng len_rng(r.seed, kLength, i);
    if (r.topk_length) lengths[i] = draw_length(len_rng, topk);
    Rng empty_rng(r.seed, kEmpty, i);
    bool empty = r.empty_queries && (empty_rng.below(16) == 0 || (s_q >= 2 && i == 1));
    if (empty && !r.invalid_indices && r.topk_length) lengths[i] = 0;
  }
  parallel_ranges(s_q, 256, [&](int64_t b, int64_t e) {
    DistinctDraw distinct;
    for (int64_t i = b; i < e; ++i) {
      Rng empty_rng(r.seed, kEmpty, i);
      bool empty = r.empty_queries && (empty_rng.below(16) == 0 || (s_q >= 2 && i == 1));
      Rng rng(r.seed, kIndices, i);
      if (r.distinct_indices) {
        distinct(rng, topk, s_kv, &c->indices[i * idx_stride]);
      } else {
        fill_list(rng, &c->indices[i * idx_stride], topk, clamp_length(lengths[i], topk), s_kv,
                  empty, r.invalid_indices);
      }
    }
  });
  if (r.topk_length) {
    c->topk_length.assign(s_q * len_stride, 0);
    for (int64_t i = 0; i < s_q; ++i) c->topk_length[i * len_stride] = lengths[i];
  }
  std::vector<uint8_t> referenced(s_kv, 0);
  for (int64_t i = 0; i < s_q; ++i) {
    int64_t len = std::clamp<int64_t>(lengths[i], 0, topk);
    c->attended += len;
    c->valid_slots += mark_referenced(&c->indices[i * idx_stride], len, s_kv, &referenced);
  }

  // q [s_q, h_q, d] bf16 and kv [s_kv, 1, d] bf16; padding elements NaN
  const int64_t q_stride_h = pad ? d + kPadBf16 : d;
  const int64_t q_stride_s = pad ? h_q * q_stride_h + kPadBf16 : h_q * q_stride_h;
  const int64_t kv_stride = pad ? d + kPadBf16 : d;
  c->q.assign(s_q * q_stride_s, kBf16NaN);
  c->kv.assign(s_kv * kv_stride, kBf16NaN);
  const float q_offset = tensor_offset(r.seed, kQ), kv_offset = tensor_offset(r.seed, kKv);
  parallel_ranges(s_q * h_q, 64, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t i = row / h_q, h = row % h_q;
      fill_row(&c->q[i * q_stride_s + h * q_stride_h], d, Rng(r.seed, kQ, row), q_offset, false);
    }
  });
  parallel_ranges(s_kv, 64, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      if (r.poison_unused_rows && !referenced[j]) continue;  // stays NaN
      fill_row(&c->kv[j * kv_stride], d, Rng(r.seed, kKv, j), kv_offset, false);
    }
  });

  c->q_view = TensorView::strided(c->q.data(), DType::kBFloat16, {s_q, h_q, d},
                                  {q_stride_s, q_stride_h, 1});
  c->kv_view =
      TensorView::strided(c->kv.data(), DType::kBFloat16, {s_kv, 1, d}, {kv_stride, kv_stride, 1});
  c->indices_view = TensorView::strided(c->indices.data(), DType::kInt32, {s_q, 1, topk},
                                        {idx_stride, idx_stride, 1});
  if (r.topk_length) {
    c->topk_length_view =
        TensorView::strided(c->topk_length.data(), DType::kInt32, {s_q}, {len_stride});
  }
  if (r.attn_sink) {
    const int64_t sink_stride = pad ? 2 : 1;
    fill_sinks(r.seed, h_q, sink_stride, &c->attn_sink);
    c->attn_sink_view =
        TensorView::strided(c->attn_sink.data(), DType::kFloat32, {h_q}, {sink_stride});
  }
  return {};
}

SparsePrefillArgs PrefillCase::args(TensorView out, TensorView max_logits, TensorView lse) const {
  SparsePrefillArgs a;
  a.q = q_view;
  a.kv = kv_view;
  a.indices = indices_view;
  a.sm_scale = sm_scale;
  a.d_v = 512;
  a.attn_sink = attn_sink_view;
  a.topk_length = topk_length_view;
  a.out = out;
  a.max_logits = max_logits;
  a.lse = lse;
  return a;
}

// ---- decode ------------------------------------------------------------------------------

namespace {

// The requests of DecodeRecipe::request_tokens: each request's length and its pages, a random
// share of one pool of b x pages_each pages.
struct RequestPages {
  std::vector<int64_t> length;  // [b] tokens
  std::vector<int32_t> page;    // [b, pages_each]: request i's page j is page[i * pages_each + j]
  int64_t pages_each = 0;
  int64_t page_size = 0;
};

// Each request's length, max(round(N(tokens, tokens / 2)), s_q), and the pages every request
// gets: the longest length's, rounded up to 4 pages.
std::vector<int64_t> request_lengths(const DecodeRecipe& r, int64_t tokens, uint64_t stream) {
  std::vector<int64_t> length(r.b);
  for (int64_t i = 0; i < r.b; ++i) {
    Rng rng(r.seed, stream, static_cast<uint64_t>(i));
    const double drawn = std::round(static_cast<double>(tokens) * (1.0 + 0.5 * gaussian(rng)));
    length[i] = std::max<int64_t>(r.s_q, drawn > 0 ? static_cast<int64_t>(drawn) : 0);
  }
  return length;
}

int64_t pages_each(const std::vector<int64_t>& length, int64_t page_size) {
  int64_t longest = 1;
  for (int64_t l : length) longest = std::max(longest, l);
  const int64_t align = 4 * page_size;
  return (longest + align - 1) / align * align / page_size;
}

RequestPages request_pages(const DecodeRecipe& r, int64_t tokens, int64_t page_size,
                           uint64_t length_stream, uint64_t page_stream) {
  RequestPages q;
  q.page_size = page_size;
  q.length = request_lengths(r, tokens, length_stream);
  q.pages_each = pages_each(q.length, page_size);
  q.page.resize(r.b * q.pages_each);
  std::iota(q.page.begin(), q.page.end(), 0);
  Rng rng(r.seed, page_stream, 0);
  for (int64_t i = static_cast<int64_t>(q.page.size()) - 1; i > 0; --i) {
    std::swap(q.page[i], q.page[rng.below(i + 1)]);
  }
  return q;
}

// One index list of a decode case: [b, s_q, topk] indices plus optional lengths; `requests`
// (or null) draws them as DecodeRecipe::request_tokens says.
struct ListPlan {
  int64_t topk, num_slots;
  bool has_length, per_token;
  uint64_t length_stream, index_stream;
  const RequestPages* requests = nullptr;
};

struct ListData {
  std::vector<int32_t> indices, lengths;  // padded storage
  int64_t stride_b = 0, stride_s = 0, len_stride_b = 0, len_stride_s = 0;
  std::vector<uint8_t> referenced;  // [num_slots]
  int64_t attended = 0;
};

void make_list(const DecodeRecipe& r, const ListPlan& p, const std::vector<uint8_t>& empty,
               ListData* out) {
  const int64_t b = r.b, s_q = r.s_q, topk = p.topk;
  const bool pad = r.padded_strides;
  out->stride_s = pad ? round_up(topk, kPadInt32) + kPadInt32 : topk;
  out->stride_b = s_q * out->stride_s + (pad ? kPadInt32 : 0);
  out->indices.assign(b * out->stride_b, 0);
  // Effective length of every query (topk when there is no length tensor).
  std::vector<int32_t> len(b * s_q, static_cast<int32_t>(topk));
  if (p.has_length) {
    if (p.per_token) {
      out->len_stride_s = 1;
      out->len_stride_b = s_q + (pad ? 1 : 0);
    } else {
      out->len_stride_s = 0;
      out->len_stride_b = pad ? 2 : 1;
    }
    out->lengths.assign(p.per_token ? b * out->len_stride_b : b * out->len_stride_b, 0);
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t si = 0; si < (p.per_token ? s_q : 1); ++si) {
        Rng rng(r.seed, p.length_stream, bi * s_q + si);
        const int32_t n = draw_length(rng, topk);
        out->lengths[bi * out->len_stride_b + si * out->len_stride_s] = n;
        if (p.per_token) {
          len[bi * s_q + si] = clamp_length(n, topk);
        } else {
          for (int64_t s = 0; s < s_q; ++s) len[bi * s_q + s] = clamp_length(n, topk);
        }
      }
    }
  }
  for (int64_t qi = 0; qi < b * s_q; ++qi) {
    if (empty[qi] && !r.invalid_indices && p.has_length) {
      // No invalid values to use: an empty query gets length 0 (written back to the tensor).
      len[qi] = 0;
      int64_t bi = qi / s_q, si = qi % s_q;
      out->lengths[bi * out->len_stride_b + (p.per_token ? si : 0)] = 0;
      if (!p.per_token) {
        for (int64_t s = 0; s < s_q; ++s) len[bi * s_q + s] = 0;
      }
    }
  }
  parallel_ranges(b * s_q, 64, [&](int64_t begin, int64_t end) {
    DistinctDraw distinct;
    for (int64_t qi = begin; qi < end; ++qi) {
      Rng rng(r.seed, p.index_stream, qi);
      int32_t* list = &out->indices[(qi / s_q) * out->stride_b + (qi % s_q) * out->stride_s];
      if (p.requests == nullptr) {
        fill_list(rng, list, topk, len[qi], p.num_slots, empty[qi], r.invalid_indices);
        continue;
      }
      // Distinct positions of the request, then each through the request's pages.
      const RequestPages& q = *p.requests;
      const int64_t bi = qi / s_q;
      distinct(rng, topk, q.length[bi], list);
      for (int64_t k = 0; k < topk && list[k] >= 0; ++k) {
        const int64_t at = list[k];
        list[k] = static_cast<int32_t>(q.page[bi * q.pages_each + at / q.page_size] * q.page_size +
                                       at % q.page_size);
      }
    }
  });
  if (r.shared_indices > 0 && s_q > 1) {
    // Draft tokens take each entry of their request's token-0 list with probability
    // shared_indices (1/1024 steps), whatever the entry holds (valid, invalid, past the length).
    const auto threshold = static_cast<int64_t>(r.shared_indices * 1024);  // checked in [0, 1]
    for (int64_t qi = 0; qi < b * s_q; ++qi) {
      if (qi % s_q == 0 || empty[qi]) continue;
      Rng rng(r.seed, kShared, (p.index_stream << 40) | static_cast<uint64_t>(qi));
      const int32_t* first = &out->indices[(qi / s_q) * out->stride_b];
      int32_t* list = &out->indices[(qi / s_q) * out->stride_b + (qi % s_q) * out->stride_s];
      for (int64_t k = 0; k < topk; ++k) {
        if (rng.below(1024) < threshold) list[k] = first[k];
      }
    }
  }
  out->referenced.assign(p.num_slots, 0);
  for (int64_t qi = 0; qi < b * s_q; ++qi) {
    out->attended += len[qi];
    mark_referenced(&out->indices[(qi / s_q) * out->stride_b + (qi % s_q) * out->stride_s], len[qi],
                    p.num_slots, &out->referenced);
  }
}

// Sets every byte of one page block that no token owns to 0xff (NaN as e4m3, ue8m0, bf16 and
// fp32): the block's tail up to its stride and, in a page_split layout whose scale rows are
// wider than the scales (v4_fp8's 8th byte), each scale row's padding. The quantizer writes these
// bytes as zero, which a stray read would turn into a harmless 0.
void poison_block_padding(const KvCacheFormatInfo& info, int d_qk, int64_t page, int64_t stride,
                          uint8_t* block) {
  int64_t used = page * kv_cache_bytes_per_token(info.format, d_qk);
  if (info.layout == KvLayout::kPageSplit) {
    const int64_t data_bytes = page * info.data_row_bytes;
    const int scale_bytes = info.num_scales * info.scale_bytes;
    for (int64_t t = 0; t < page; ++t) {
      uint8_t* scale_row = block + data_bytes + t * info.scale_row_bytes;
      std::fill(scale_row + scale_bytes, scale_row + info.scale_row_bytes, uint8_t{0xff});
    }
    used = data_bytes + page * info.scale_row_bytes;
  }
  std::fill(block + used, block + stride, uint8_t{0xff});
}

// Builds a paged cache of `num_blocks` x `page` tokens in (format, layout): random rows, NaN rows
// where unreferenced (when poisoning), quantized block by block (no full bf16 copy of a large
// cache is ever held), then the padding poisoned.
Status make_cache(const DecodeRecipe& r, KvCacheFormat format, KvLayout layout, int d_qk,
                  int64_t num_blocks, int64_t page, const std::vector<uint8_t>& referenced,
                  uint64_t stream, std::vector<uint8_t>* bytes, KvCacheView* view) {
  const KvCacheFormatInfo& info = kv_cache_format_info(format, layout);
  int64_t stride = kv_cache_min_block_stride(format, page, d_qk, layout);
  if (r.padded_strides) {
    stride +=
        info.block_alignment > 1 ? info.block_alignment : kv_cache_bytes_per_token(format, d_qk);
  }
  bytes->assign(num_blocks * stride, 0xff);
  *view = KvCacheView{bytes->data(), format, num_blocks, page, stride, d_qk, Device::cpu(), layout};
  const float offset = tensor_offset(r.seed, stream);
  // ~1 MB of bf16 per chunk of blocks.
  const int64_t chunk_blocks = std::max<int64_t>(1, (1 << 20) / (page * d_qk * 2));
  const int64_t num_chunks = (num_blocks + chunk_blocks - 1) / chunk_blocks;
  std::vector<Status> statuses(num_chunks);
  RunOptions one_thread;  // the chunks already run in parallel
  one_thread.num_threads = 1;
  parallel_ranges(num_chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint16_t> rows;
    for (int64_t ch = begin; ch < end; ++ch) {
      int64_t b0 = ch * chunk_blocks, nb = std::min(chunk_blocks, num_blocks - b0);
      rows.assign(nb * page * d_qk, kBf16NaN);
      for (int64_t t = 0; t < nb * page; ++t) {
        int64_t slot = b0 * page + t;
        if (r.poison_unused_rows && !referenced[slot]) continue;
        fill_row(&rows[t * d_qk], d_qk, Rng(r.seed, stream, slot), offset, false);
      }
      TensorView src = TensorView::contiguous(rows.data(), DType::kBFloat16, {nb, page, 1, d_qk});
      KvCacheView dst = *view;
      dst.data = bytes->data() + b0 * stride;
      dst.num_blocks = nb;
      statuses[ch] = quantize_kv_cache(src, dst, one_thread);
      if (!statuses[ch].ok()) continue;
      for (int64_t blk = b0; blk < b0 + nb; ++blk) {
        poison_block_padding(info, d_qk, page, stride, bytes->data() + blk * stride);
      }
    }
  });
  for (const Status& s : statuses) SMLA_RETURN_IF_ERROR(s);
  return {};
}

int64_t count_referenced(const std::vector<uint8_t>& referenced) {
  return std::count(referenced.begin(), referenced.end(), uint8_t{1});
}

}  // namespace

DecodeCacheBlocks decode_cache_blocks(const DecodeRecipe& r) {
  // FlashMLA's requests (request_tokens), or by default about twice the slots the lists index.
  // A recipe make_decode_case refuses (b x tokens past 2^28) gets an estimate, not b draws.
  auto blocks_for = [&](int64_t given, int64_t tokens, uint64_t stream, int64_t topk,
                        int64_t page) -> int64_t {
    page = std::max<int64_t>(page, 1);
    if (tokens > 0 && r.b >= 1 && tokens <= INT_MAX / 8 / r.b) {
      return r.b * pages_each(request_lengths(r, tokens, stream), page);
    }
    const double slots = tokens > 0 ? double(r.b) * double(tokens) : 2.0 * r.b * r.s_q * topk;
    if (given > 0 && tokens <= 0) return given;
    return static_cast<int64_t>(std::clamp(std::ceil(slots / page), 1.0, 0x1p62));
  };
  DecodeCacheBlocks blocks;
  blocks.main =
      blocks_for(r.num_blocks, r.request_tokens, kRequestLengths, r.topk, r.page_block_size);
  if (r.extra_cache) {
    blocks.extra = blocks_for(r.extra_num_blocks, r.extra_request_tokens, kExtraRequestLengths,
                              r.extra_topk, r.extra_page_block_size);
  }
  return blocks;
}

Status make_decode_case(const DecodeRecipe& r, DecodeCase* c) {
  if (c == nullptr) return invalid_argument("make_decode_case: out is null");
  SMLA_RETURN_IF_ERROR(check_recipe_dims("make_decode_case", r.s_q, r.h_q, r.topk));
  const KvCacheFormatInfo& info = kv_cache_format_info(r.format);
  const int d_qk = r.d_qk != 0 ? r.d_qk : (info.d_qk != 0 ? info.d_qk : 576);
  const KvCacheFormat extra_format = r.extra_format.value_or(r.format);
  for (const auto& [format, layout, what, used] :
       {std::tuple{r.format, r.kv_layout, "kv_layout", true},
        std::tuple{extra_format, r.extra_kv_layout, "extra_kv_layout", r.extra_cache}}) {
    if (used && !kv_cache_layout_supported(format, layout)) {
      return invalid_argument(std::string("make_decode_case: recipe ") + what + " = " +
                              kv_layout_name(layout) + " is not a layout of format " +
                              kv_cache_format_name(format));
    }
  }
  const int extra_d_qk = kv_cache_format_info(extra_format).d_qk;
  if (r.extra_cache && extra_d_qk != 0 && extra_d_qk != d_qk) {
    return invalid_argument("make_decode_case: recipe extra_format = " +
                            std::string(kv_cache_format_name(extra_format)) + " has d_qk " +
                            std::to_string(extra_d_qk) + ", the main cache " +
                            std::to_string(d_qk));
  }
  if (!(r.shared_indices >= 0.0 && r.shared_indices <= 1.0)) {
    return invalid_argument("make_decode_case: recipe shared_indices = " +
                            std::to_string(r.shared_indices) + " must be in [0, 1]");
  }
  for (const auto& [tokens, given_blocks, name] :
       {std::tuple{r.request_tokens, r.num_blocks, "request_tokens"},
        std::tuple{r.extra_cache ? r.extra_request_tokens : int64_t{0}, r.extra_num_blocks,
                   "extra_request_tokens"}}) {
    // A request's length stays below ~5.3 x tokens (Box-Muller's tail), its pages below 2^31.
    if (tokens < 0 || (tokens > 0 && (given_blocks != 0 || r.invalid_indices || r.empty_queries ||
                                      tokens > INT_MAX / 8 / std::max<int64_t>(r.b, 1)))) {
      return invalid_argument(std::string("make_decode_case: recipe ") + name + " = " +
                              std::to_string(tokens) +
                              " needs its cache's num_blocks 0, invalid_indices and empty_queries "
                              "off, and b x tokens below 2^28");
    }
  }
  if (r.b < 1 || r.page_block_size < 1 || (d_qk != 512 && d_qk != 576) ||
      (info.d_qk != 0 && d_qk != info.d_qk) ||
      (r.extra_cache && (r.extra_topk < 1 || r.extra_page_block_size < 1))) {
    return invalid_argument(
        "make_decode_case: recipe needs b >= 1, page sizes >= 1, extra_topk"
        " >= 1 and a d_qk the format supports (got b " +
        std::to_string(r.b) + ", d_qk " + std::to_string(d_qk) + ")");
  }
  *c = DecodeCase{};
  c->recipe = r;
  const int64_t b = r.b, s_q = r.s_q, h_q = r.h_q, nq = b * s_q;
  const bool pad = r.padded_strides;
  const DecodeCacheBlocks blocks = decode_cache_blocks(r);
  const int64_t num_blocks = blocks.main, extra_blocks = blocks.extra;
  std::optional<RequestPages> requests, extra_requests;
  if (r.request_tokens > 0) {
    requests =
        request_pages(r, r.request_tokens, r.page_block_size, kRequestLengths, kRequestPages);
  }
  if (r.extra_cache && r.extra_request_tokens > 0) {
    extra_requests = request_pages(r, r.extra_request_tokens, r.extra_page_block_size,
                                   kExtraRequestLengths, kExtraRequestPages);
  }
  if (num_blocks * r.page_block_size > INT_MAX ||
      extra_blocks * r.extra_page_block_size > INT_MAX) {
    return invalid_argument("make_decode_case: a cache has more than 2^31-1 slots");
  }

  c->problem.b = b;
  c->problem.s_q = s_q;
  c->problem.h_q = h_q;
  c->problem.d_qk = d_qk;
  c->problem.d_v = 512;
  c->problem.topk = r.topk;
  c->problem.format = r.format;
  c->problem.kv_layout = resolve_kv_layout(r.format, r.kv_layout);
  if (r.extra_cache) {
    c->problem.extra_format = extra_format;
    c->problem.extra_kv_layout = resolve_kv_layout(extra_format, r.extra_kv_layout);
  }
  c->problem.page_block_size = r.page_block_size;
  c->problem.has_topk_length = r.topk_length;
  c->problem.topk_length_per_token = r.topk_length && r.topk_length_per_token;
  c->problem.has_attn_sink = r.attn_sink;
  c->problem.has_extra = r.extra_cache;
  c->problem.extra_topk = r.extra_cache ? r.extra_topk : 0;
  c->problem.extra_page_block_size = r.extra_cache ? r.extra_page_block_size : 0;
  c->problem.has_extra_topk_length = r.extra_cache && r.extra_topk_length;
  c->problem.extra_topk_length_per_token =
      r.extra_cache && r.extra_topk_length && r.extra_topk_length_per_token;
  c->problem.device = Device::cpu();
  c->softmax_scale = r.softmax_scale;

  // Queries with no valid slot in either list.
  std::vector<uint8_t> empty(nq, 0);
  for (int64_t qi = 0; qi < nq; ++qi) {
    Rng rng(r.seed, kEmpty, qi);
    empty[qi] = r.empty_queries && (rng.below(16) == 0 || (nq >= 2 && qi == 1));
  }

  ListData main;
  make_list(r,
            ListPlan{r.topk, num_blocks * r.page_block_size, r.topk_length, r.topk_length_per_token,
                     kLength, kIndices, requests ? &*requests : nullptr},
            empty, &main);
  SMLA_RETURN_IF_ERROR(make_cache(r, r.format, resolve_kv_layout(r.format, r.kv_layout), d_qk,
                                  num_blocks, r.page_block_size, main.referenced, kKv, &c->cache,
                                  &c->cache_view));
  c->indices = std::move(main.indices);
  c->topk_length = std::move(main.lengths);
  c->indices_view = TensorView::strided(c->indices.data(), DType::kInt32, {b, s_q, r.topk},
                                        {main.stride_b, main.stride_s, 1});
  if (r.topk_length) {
    c->topk_length_view =
        r.topk_length_per_token
            ? TensorView::strided(c->topk_length.data(), DType::kInt32, {b, s_q},
                                  {main.len_stride_b, 1})
            : TensorView::strided(c->topk_length.data(), DType::kInt32, {b}, {main.len_stride_b});
  }
  c->attended = main.attended;
  c->retrieved_main = count_referenced(main.referenced);

  if (r.extra_cache) {
    ListData extra;
    make_list(r,
              ListPlan{r.extra_topk, extra_blocks * r.extra_page_block_size, r.extra_topk_length,
                       r.extra_topk_length_per_token, kExtraLength, kExtraIndices,
                       extra_requests ? &*extra_requests : nullptr},
              empty, &extra);
    KvCacheView extra_view;
    SMLA_RETURN_IF_ERROR(make_cache(
        r, extra_format, resolve_kv_layout(extra_format, r.extra_kv_layout), d_qk, extra_blocks,
        r.extra_page_block_size, extra.referenced, kExtraKv, &c->extra_cache, &extra_view));
    c->extra_cache_view = extra_view;
    c->extra_indices = std::move(extra.indices);
    c->extra_topk_length = std::move(extra.lengths);
    c->extra_indices_view =
        TensorView::strided(c->extra_indices.data(), DType::kInt32, {b, s_q, r.extra_topk},
                            {extra.stride_b, extra.stride_s, 1});
    if (r.extra_topk_length) {
      c->extra_topk_length_view =
          r.extra_topk_length_per_token
              ? TensorView::strided(c->extra_topk_length.data(), DType::kInt32, {b, s_q},
                                    {extra.len_stride_b, 1})
              : TensorView::strided(c->extra_topk_length.data(), DType::kInt32, {b},
                                    {extra.len_stride_b});
    }
    c->attended += extra.attended;
    c->retrieved_extra = count_referenced(extra.referenced);
  }

  // q [b, s_q, h_q, d_qk] bf16, clamped to +-1; padding NaN
  const int64_t q_stride_h = pad ? d_qk + kPadBf16 : d_qk;
  const int64_t q_stride_s = h_q * q_stride_h + (pad ? kPadBf16 : 0);
  const int64_t q_stride_b = s_q * q_stride_s + (pad ? kPadBf16 : 0);
  c->q.assign(b * q_stride_b, kBf16NaN);
  const float q_offset = tensor_offset(r.seed, kQ);
  parallel_ranges(nq * h_q, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t qi = row / h_q, h = row % h_q;
      fill_row(&c->q[(qi / s_q) * q_stride_b + (qi % s_q) * q_stride_s + h * q_stride_h], d_qk,
               Rng(r.seed, kQ, row), q_offset, true);
    }
  });
  c->q_view = TensorView::strided(c->q.data(), DType::kBFloat16, {b, s_q, h_q, d_qk},
                                  {q_stride_b, q_stride_s, q_stride_h, 1});
  if (r.attn_sink) {
    const int64_t sink_stride = pad ? 2 : 1;
    fill_sinks(r.seed, h_q, sink_stride, &c->attn_sink);
    c->attn_sink_view =
        TensorView::strided(c->attn_sink.data(), DType::kFloat32, {h_q}, {sink_stride});
  }
  return {};
}

SparseDecodeArgs DecodeCase::args(TensorView out, TensorView lse) const {
  SparseDecodeArgs a;
  a.q = q_view;
  a.kv_cache = cache_view;
  a.indices = indices_view;
  a.topk_length = topk_length_view;
  a.attn_sink = attn_sink_view;
  a.extra_kv_cache = extra_cache_view;
  a.extra_indices = extra_indices_view;
  a.extra_topk_length = extra_topk_length_view;
  a.softmax_scale = softmax_scale;
  a.d_v = 512;
  a.out = out;
  a.lse = lse;
  return a;
}

// ---- outputs -----------------------------------------------------------------------------

void allocate_outputs(const SparsePrefillProblem& p, PrefillOutputs* out, bool padded) {
  const int64_t s_q = p.s_q, h_q = p.h_q, d_v = p.d_v;
  const int64_t out_h = padded ? d_v + kPadBf16 : d_v;
  const int64_t out_s = h_q * out_h + (padded ? kPadBf16 : 0);
  const int64_t stat_s = padded ? round_up(h_q, kPadFloat) + kPadFloat : h_q;
  out->out.assign(s_q * out_s, kBf16NaN);
  out->max_logits.assign(s_q * stat_s, NAN);
  out->lse.assign(s_q * stat_s, NAN);
  out->out_view =
      TensorView::strided(out->out.data(), DType::kBFloat16, {s_q, h_q, d_v}, {out_s, out_h, 1});
  out->max_logits_view =
      TensorView::strided(out->max_logits.data(), DType::kFloat32, {s_q, h_q}, {stat_s, 1});
  out->lse_view = TensorView::strided(out->lse.data(), DType::kFloat32, {s_q, h_q}, {stat_s, 1});
}

void allocate_outputs(const SparseDecodeProblem& p, DecodeOutputs* out, bool padded) {
  const int64_t b = p.b, s_q = p.s_q, h_q = p.h_q, d_v = p.d_v;
  const int64_t out_h = padded ? d_v + kPadBf16 : d_v;
  const int64_t out_s = h_q * out_h + (padded ? kPadBf16 : 0);
  const int64_t out_b = s_q * out_s + (padded ? kPadBf16 : 0);
  const int64_t lse_s = padded ? round_up(h_q, kPadFloat) + kPadFloat : h_q;
  const int64_t lse_b = s_q * lse_s + (padded ? kPadFloat : 0);
  out->out.assign(b * out_b, kBf16NaN);
  out->lse.assign(b * lse_b, NAN);
  out->out_view = TensorView::strided(out->out.data(), DType::kBFloat16, {b, s_q, h_q, d_v},
                                      {out_b, out_s, out_h, 1});
  out->lse_view =
      TensorView::strided(out->lse.data(), DType::kFloat32, {b, s_q, h_q}, {lse_b, lse_s, 1});
}

void allocate_outputs(const SparsePrefillProblem& p, PrefillOutputs* out) {
  allocate_outputs(p, out, false);
}
void allocate_outputs(const SparseDecodeProblem& p, DecodeOutputs* out) {
  allocate_outputs(p, out, false);
}

// ---- device copies -----------------------------------------------------------------------

namespace {

// Copies `bytes` of host memory to a new buffer on `device`; returns its pointer in *dst.
template <typename T>
Status upload_vector(const std::vector<T>& v, Device device, std::vector<Buffer>* buffers,
                     void** dst) {
  Buffer buf;
  SMLA_RETURN_IF_ERROR(Buffer::allocate(device, v.size() * sizeof(T), &buf));
  SMLA_RETURN_IF_ERROR(
      copy_bytes(buf.data(), device, v.data(), Device::cpu(), v.size() * sizeof(T)));
  *dst = buf.data();
  buffers->push_back(std::move(buf));
  return {};
}

// The same view pointing into a device copy of `v`.
template <typename T>
Status upload_view(const std::vector<T>& v, const TensorView& host, Device device,
                   std::vector<Buffer>* buffers, TensorView* out) {
  void* ptr = nullptr;
  SMLA_RETURN_IF_ERROR(upload_vector(v, device, buffers, &ptr));
  *out = host;
  out->data = static_cast<char*>(ptr) +
              (static_cast<const char*>(host.data) - reinterpret_cast<const char*>(v.data()));
  out->device = device;
  return {};
}

// An optional input: absent stays absent, present is uploaded as upload_view does.
template <typename T>
Status upload_optional(const std::vector<T>& v, const std::optional<TensorView>& host,
                       Device device, std::vector<Buffer>* buffers,
                       std::optional<TensorView>* out) {
  if (!host) {
    out->reset();
    return {};
  }
  return upload_view(v, *host, device, buffers, &out->emplace());
}

// The same cache view over a device copy of its bytes.
Status upload_cache(const std::vector<uint8_t>& bytes, const KvCacheView& host, Device device,
                    std::vector<Buffer>* buffers, KvCacheView* out) {
  void* ptr = nullptr;
  SMLA_RETURN_IF_ERROR(upload_vector(bytes, device, buffers, &ptr));
  *out = host;
  out->data = ptr;
  out->device = device;
  return {};
}

}  // namespace

Status upload(const PrefillCase& c, Device device, DevicePrefillInputs* out) {
  if (out == nullptr) return invalid_argument("upload: out is null");
  *out = DevicePrefillInputs{};
  SparsePrefillArgs& a = out->args_template;
  a.sm_scale = c.sm_scale;
  a.d_v = 512;
  SMLA_RETURN_IF_ERROR(upload_view(c.q, c.q_view, device, &out->buffers, &a.q));
  SMLA_RETURN_IF_ERROR(upload_view(c.kv, c.kv_view, device, &out->buffers, &a.kv));
  SMLA_RETURN_IF_ERROR(upload_view(c.indices, c.indices_view, device, &out->buffers, &a.indices));
  SMLA_RETURN_IF_ERROR(
      upload_optional(c.attn_sink, c.attn_sink_view, device, &out->buffers, &a.attn_sink));
  return upload_optional(c.topk_length, c.topk_length_view, device, &out->buffers, &a.topk_length);
}

Status upload(const DecodeCase& c, Device device, DeviceDecodeInputs* out) {
  if (out == nullptr) return invalid_argument("upload: out is null");
  *out = DeviceDecodeInputs{};
  SparseDecodeArgs& a = out->args_template;
  a.softmax_scale = c.softmax_scale;
  a.d_v = 512;
  SMLA_RETURN_IF_ERROR(upload_view(c.q, c.q_view, device, &out->buffers, &a.q));
  SMLA_RETURN_IF_ERROR(upload_view(c.indices, c.indices_view, device, &out->buffers, &a.indices));
  SMLA_RETURN_IF_ERROR(upload_cache(c.cache, c.cache_view, device, &out->buffers, &a.kv_cache));
  SMLA_RETURN_IF_ERROR(
      upload_optional(c.topk_length, c.topk_length_view, device, &out->buffers, &a.topk_length));
  SMLA_RETURN_IF_ERROR(
      upload_optional(c.attn_sink, c.attn_sink_view, device, &out->buffers, &a.attn_sink));
  if (c.extra_cache_view) {
    SMLA_RETURN_IF_ERROR(upload_cache(c.extra_cache, *c.extra_cache_view, device, &out->buffers,
                                      &a.extra_kv_cache.emplace()));
    SMLA_RETURN_IF_ERROR(upload_optional(c.extra_indices, c.extra_indices_view, device,
                                         &out->buffers, &a.extra_indices));
    SMLA_RETURN_IF_ERROR(upload_optional(c.extra_topk_length, c.extra_topk_length_view, device,
                                         &out->buffers, &a.extra_topk_length));
  }
  return {};
}

}  // namespace sparse_mla::verify
