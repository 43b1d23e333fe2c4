// Argument validation for sparse_prefill and sparse_decode (see validate.h). Each check returns
// the first problem found, phrased as "<op>: <argument> <what is wrong> (<value>)".
#include "core/validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "core/kv_cache_layout.h"

namespace sparse_mla::detail {

bool offsets_fit_int64(const TensorView& t, size_t element_bytes) {
  if (t.rank < 0 || t.rank > kMaxRank) return false;
  if (t.numel() == 0) return true;
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) {
    int64_t step = 0;
    if (t.sizes[d] < 0 || t.strides[d] < 0 ||
        __builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return false;
    }
  }
  int64_t bytes = 0;
  return !__builtin_add_overflow(last, 1, &last) &&
         !__builtin_mul_overflow(last, static_cast<int64_t>(element_bytes), &bytes);
}

bool views_distinct_elements(const TensorView& t) {
  if (t.rank < 0 || t.rank > kMaxRank) return false;
  if (t.numel() == 0) return true;
  std::array<int, kMaxRank> dims{};
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] > 1) dims[n++] = d;
  }
  for (int i = 1; i < n; ++i) {  // insertion sort by stride: at most 4 dimensions
    for (int j = i; j > 0 && t.strides[dims[j]] < t.strides[dims[j - 1]]; --j) {
      std::swap(dims[j], dims[j - 1]);
    }
  }
  // span: one past the largest element offset the smaller-stride dimensions reach.
  int64_t span = 1;
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.strides[d] < span) return false;
    int64_t reach = 0;
    if (__builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &reach) ||
        __builtin_add_overflow(span, reach, &span)) {
      return false;
    }
  }
  return true;
}

ByteRange byte_range(const TensorView& t) {
  if (t.numel() == 0) return {};
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.sizes[d] - 1) * t.strides[d];
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  return {begin, begin + static_cast<uintptr_t>((last + 1) * dtype_size(t.dtype))};
}

ByteRange byte_range(const KvCacheView& c) {
  if (c.num_blocks <= 0) return {};
  const auto begin = reinterpret_cast<uintptr_t>(c.data);
  // The last block ends with its last token's bytes: a v4_fp8 block's padding to 576 B is never
  // read, and a packed copy (torch's clone of the last block) need not hold it.
  const int64_t bytes = (c.num_blocks - 1) * c.block_stride_bytes +
                        c.page_block_size * kv_cache_bytes_per_token(c.format, c.d_qk);
  return {begin, begin + static_cast<uintptr_t>(bytes)};
}

namespace {

// Builds messages with a fixed "<op>: " prefix.
class Checker {
 public:
  explicit Checker(const char* op) : op_(op) {}

  Status fail(const std::string& message) const {
    return invalid_argument(std::string(op_) + ": " + message);
  }

  // Rank, dtype, non-null data, non-negative sizes and strides, unit stride in the last dim
  // (when `last_dim_contiguous`), element alignment of the data pointer.
  Status tensor(const char* name, const TensorView& t, int rank, DType dtype,
                bool last_dim_contiguous = true) const {
    if (t.rank < 0 || t.rank > kMaxRank) {
      return fail(std::string(name) + ".rank = " + std::to_string(t.rank) + " is outside [0, " +
                  std::to_string(kMaxRank) + "]; expected rank " + std::to_string(rank));
    }
    if (t.rank != rank) {
      return fail(std::string(name) + " must have rank " + std::to_string(rank) + ", got rank " +
                  std::to_string(t.rank) + " (" + describe(t) + ")");
    }
    if (t.dtype != dtype) {
      return fail(std::string(name) + " must be " + dtype_name(dtype) + ", got " +
                  dtype_name(t.dtype));
    }
    for (int d = 0; d < rank; ++d) {
      if (t.sizes[d] < 0) {
        return fail(std::string(name) + ".sizes[" + std::to_string(d) +
                    "] = " + std::to_string(t.sizes[d]) + " is negative");
      }
      if (t.strides[d] < 0) {
        return fail(std::string(name) + ".strides[" + std::to_string(d) +
                    "] = " + std::to_string(t.strides[d]) + " is negative");
      }
    }
    if (!offsets_fit_int64(t, dtype_size(dtype))) {
      return fail(std::string(name) + " (" + describe(t) +
                  ") spans more than 2^63 bytes: its sizes and strides overflow 64-bit offsets");
    }
    if (t.numel() > 0 && t.data == nullptr) {
      return fail(std::string(name) + ".data is null for a non-empty tensor (" + describe(t) + ")");
    }
    if (last_dim_contiguous && t.sizes[rank - 1] > 1 && t.strides[rank - 1] != 1) {
      return fail(std::string(name) + " must be contiguous in its last dimension, got stride " +
                  std::to_string(t.strides[rank - 1]));
    }
    auto address = reinterpret_cast<uintptr_t>(t.data);
    if (address % dtype_size(dtype) != 0) {
      return fail(std::string(name) + ".data = " + pointer_text(t.data) +
                  " is not aligned to its element size " + std::to_string(dtype_size(dtype)));
    }
    return {};
  }

  // 16-byte alignment of the base pointer and of every row stride: the CUDA kernels load rows
  // with 16-byte vector loads and cp.async.
  Status rows_16b_aligned(const char* name, const TensorView& t) const {
    size_t elem = dtype_size(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
      return fail(std::string(name) + ".data = " + pointer_text(t.data) +
                  " must be 16-byte aligned for the CUDA back end");
    }
    for (int d = 0; d + 1 < t.rank; ++d) {
      if (t.sizes[d] > 1 && (t.strides[d] * static_cast<int64_t>(elem)) % 16 != 0) {
        return fail(std::string(name) + ".strides[" + std::to_string(d) +
                    "] = " + std::to_string(t.strides[d]) +
                    " elements is not a multiple of 16 bytes, required by the CUDA back end");
      }
    }
    return {};
  }

  // Outputs must not overlap themselves: two index tuples that address one element would make
  // threads and CTAs write it twice (views_distinct_elements says which layouts are accepted).
  Status no_self_overlap(const char* name, const TensorView& t) const {
    for (int d = 0; d < t.rank; ++d) {
      if (t.sizes[d] > 1 && t.strides[d] == 0) {
        return fail(std::string(name) + ".strides[" + std::to_string(d) +
                    "] = 0 makes the output overlap itself (size " + std::to_string(t.sizes[d]) +
                    ")");
      }
    }
    if (!views_distinct_elements(t)) {
      return fail(std::string(name) + " (" + describe(t) +
                  ") overlaps itself: with its dimensions ordered by stride, each stride must be "
                  "at least the span of the dimensions with smaller strides");
    }
    return {};
  }

  Status size_is(const char* name, const TensorView& t, int dim, int64_t expected,
                 const char* meaning) const {
    if (t.sizes[dim] != expected) {
      return fail(std::string(name) + ".sizes[" + std::to_string(dim) + "] (" + meaning +
                  ") = " + std::to_string(t.sizes[dim]) + ", expected " + std::to_string(expected));
    }
    return {};
  }

  Status same_device(const char* name, const TensorView& t, Device device) const {
    if (!(t.device == device)) {
      return fail(std::string(name) + " is on " + to_string(t.device) + " but q is on " +
                  to_string(device));
    }
    return {};
  }

  // snprintf, not a stream: see describe() in basic_types.cpp.
  static std::string pointer_text(const void* p) {
    char text[2 + 2 * sizeof(void*) + 1];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
  }

 private:
  const char* op_;
};

Status check_heads_and_dims(const Checker& c, const char* name, const TensorView& q, int h_dim) {
  int64_t h_q = q.sizes[h_dim];
  if (h_q < 1 || h_q > kMaxHeads) {
    return c.fail(std::string(name) + ".sizes[" + std::to_string(h_dim) +
                  "] (h_q) = " + std::to_string(h_q) + " is out of range [1, 128]");
  }
  int64_t d_qk = q.sizes[h_dim + 1];
  if (d_qk != 512 && d_qk != 576) {
    return c.fail(std::string(name) + ".sizes[" + std::to_string(h_dim + 1) + "] (d_qk) = " +
                  std::to_string(d_qk) + " is not supported; d_qk must be 576 (V3.2) or 512 (V4)");
  }
  return {};
}

Status check_d_v(const Checker& c, int d_v) {
  if (d_v != kValueDim) {
    return c.fail("d_v = " + std::to_string(d_v) + " is not supported; d_v must be 512");
  }
  return {};
}

// The kernels work with scores in log2 units, score * scale * log2(e), in fp32: a scale above
// FLT_MAX / log2(e) (~2.36e38) would turn every score into inf and the outputs into NaN.
inline constexpr float kMaxSoftmaxScale = std::numeric_limits<float>::max() / 1.4426950408889634f;

// A float as "%.9g" prints it: every float round-trips, and 0 reads "0", not "0.000000".
std::string float_text(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

Status check_scale(const Checker& c, const char* name, float scale) {
  if (!std::isfinite(scale) || !(scale > 0.0f)) {
    return c.fail(std::string(name) + " = " + float_text(scale) +
                  " must be finite and > 0 (the softmax scale, e.g. d_qk ** -0.5)");
  }
  if (scale > kMaxSoftmaxScale) {
    return c.fail(std::string(name) + " = " + float_text(scale) +
                  " is too large: scale * log2(e) must fit an fp32 (at most " +
                  float_text(kMaxSoftmaxScale) + ")");
  }
  return {};
}

Status check_attn_sink(const Checker& c, const std::optional<TensorView>& sink, int64_t h_q,
                       Device device) {
  if (!sink) return {};
  SMLA_RETURN_IF_ERROR(c.tensor("attn_sink", *sink, 1, DType::kFloat32, false));
  SMLA_RETURN_IF_ERROR(c.size_is("attn_sink", *sink, 0, h_q, "h_q"));
  return c.same_device("attn_sink", *sink, device);
}

}  // namespace

Status validate_kv_cache_view(const char* op, const char* what, const KvCacheView& cache) {
  Checker c(op);
  std::string w(what);
  if (std::string e = kv_cache_layout_error(cache, w, 1); !e.empty()) return c.fail(e);
  if (cache.data == nullptr) return c.fail(w + ".data is null");
  // Token rows are read with 16-byte loads on CUDA, and scale words with 4-byte loads.
  if (reinterpret_cast<uintptr_t>(cache.data) % 16 != 0) {
    return c.fail(w + ".data = " + Checker::pointer_text(cache.data) + " must be 16-byte aligned");
  }
  if (cache.block_stride_bytes % 16 != 0) {
    return c.fail(w + ".block_stride_bytes = " + std::to_string(cache.block_stride_bytes) +
                  " must be a multiple of 16");
  }
  if (cache.num_blocks > INT64_MAX / cache.page_block_size ||
      cache.num_slots() > static_cast<int64_t>(INT32_MAX) + 1) {
    return c.fail(w + " has " + std::to_string(cache.num_blocks) + " blocks of " +
                  std::to_string(cache.page_block_size) +
                  " tokens, more slots than int32 indices can address");
  }
  return {};
}

bool extra_format_allowed(KvCacheFormat main, KvCacheFormat extra) {
  return main == extra || kv_cache_extra_format_allowed(main, extra);
}

const char* extra_format_rule(KvCacheFormat main) { return kv_cache_extra_format_rule(main); }

SparseDecodeProblem normalized_decode_problem(const SparseDecodeProblem& problem) {
  SparseDecodeProblem p = problem;
  p.kv_layout = resolve_kv_layout(p.format, p.kv_layout);
  if (p.has_extra) {
    p.extra_format = p.extra_format.value_or(p.format);
    p.extra_kv_layout = resolve_kv_layout(*p.extra_format, p.extra_kv_layout);
  } else {
    p.extra_format.reset();
    p.extra_kv_layout = KvLayout::kDefault;
  }
  return p;
}

Status validate_decode_problem(const SparseDecodeProblem& pr) {
  Checker c("plan_sparse_decode");
  auto in_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return c.fail(std::string("problem.") + name + " = " + std::to_string(v) +
                    " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return {};
  };
  SMLA_RETURN_IF_ERROR(in_range("b", pr.b, 0, INT32_MAX));
  SMLA_RETURN_IF_ERROR(in_range("s_q", pr.s_q, 1, INT32_MAX));
  SMLA_RETURN_IF_ERROR(in_range("h_q", pr.h_q, 1, kMaxHeads));
  if (pr.d_qk != 512 && pr.d_qk != 576) {
    return c.fail("problem.d_qk = " + std::to_string(pr.d_qk) + " must be 512 or 576");
  }
  SMLA_RETURN_IF_ERROR(in_range("d_v", pr.d_v, kValueDim, kValueDim));
  SMLA_RETURN_IF_ERROR(in_range("topk", pr.topk, 1, INT32_MAX));
  SMLA_RETURN_IF_ERROR(in_range("page_block_size", pr.page_block_size, 1, INT32_MAX));
  const KvCacheFormatInfo& info = kv_cache_format_info(pr.format);
  if (info.format != pr.format) {  // the table's "unknown" row
    return c.fail("problem.format = " + std::to_string(static_cast<int>(pr.format)) +
                  " is not a KV-cache format of this build");
  }
  if (info.d_qk != 0 && info.d_qk != pr.d_qk) {
    return c.fail("problem.d_qk = " + std::to_string(pr.d_qk) + " does not match format " +
                  std::string(info.name));
  }
  if (!kv_cache_layout_supported(pr.format, pr.kv_layout)) {
    return c.fail(std::string("problem.kv_layout = ") + kv_layout_name(pr.kv_layout) +
                  " is not a layout of format " + std::string(info.name));
  }
  if (pr.has_extra) {
    const KvCacheFormat extra = pr.extra_format.value_or(pr.format);
    if (!extra_format_allowed(pr.format, extra)) {
      return c.fail(std::string("problem.extra_format = ") + kv_cache_format_name(extra) +
                    " cannot go with format = " + std::string(info.name) + " (" +
                    extra_format_rule(pr.format) + ")");
    }
    if (!kv_cache_layout_supported(extra, pr.extra_kv_layout)) {
      return c.fail(std::string("problem.extra_kv_layout = ") + kv_layout_name(pr.extra_kv_layout) +
                    " is not a layout of format " + kv_cache_format_name(extra));
    }
    SMLA_RETURN_IF_ERROR(in_range("extra_topk", pr.extra_topk, 1, INT32_MAX));
    SMLA_RETURN_IF_ERROR(in_range("extra_page_block_size", pr.extra_page_block_size, 1, INT32_MAX));
  } else if (pr.extra_topk != 0 || pr.has_extra_topk_length || pr.extra_format) {
    return c.fail(
        "problem.extra_topk / has_extra_topk_length / extra_format are set but has_extra is "
        "false");
  }
  return {};
}

Status validate_prefill_problem(const char* op, const SparsePrefillProblem& pr) {
  Checker c(op);
  auto in_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return c.fail(std::string("problem.") + name + " = " + std::to_string(v) +
                    " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return {};
  };
  SMLA_RETURN_IF_ERROR(in_range("s_q", pr.s_q, 0, INT64_MAX));
  SMLA_RETURN_IF_ERROR(in_range("s_kv", pr.s_kv, 0, INT32_MAX));
  SMLA_RETURN_IF_ERROR(in_range("h_q", pr.h_q, 1, kMaxHeads));
  if (pr.d_qk != 512 && pr.d_qk != 576) {
    return c.fail("problem.d_qk = " + std::to_string(pr.d_qk) + " must be 512 or 576");
  }
  SMLA_RETURN_IF_ERROR(in_range("d_v", pr.d_v, kValueDim, kValueDim));
  return in_range("topk", pr.topk, 1, INT64_MAX);
}

Status validate_prefill(const SparsePrefillArgs& a, PrefillParams* p) {
  Checker c("sparse_prefill");
  SMLA_RETURN_IF_ERROR(c.tensor("q", a.q, 3, DType::kBFloat16));
  SMLA_RETURN_IF_ERROR(check_heads_and_dims(c, "q", a.q, 1));
  const int64_t s_q = a.q.sizes[0], h_q = a.q.sizes[1], d_qk = a.q.sizes[2];
  const Device device = a.q.device;

  SMLA_RETURN_IF_ERROR(c.tensor("kv", a.kv, 3, DType::kBFloat16));
  SMLA_RETURN_IF_ERROR(c.size_is("kv", a.kv, 1, 1, "h_kv"));
  SMLA_RETURN_IF_ERROR(c.size_is("kv", a.kv, 2, d_qk, "d_qk"));
  SMLA_RETURN_IF_ERROR(c.same_device("kv", a.kv, device));
  const int64_t s_kv = a.kv.sizes[0];
  if (s_kv > static_cast<int64_t>(INT32_MAX)) {
    return c.fail("kv.sizes[0] (s_kv) = " + std::to_string(s_kv) +
                  " exceeds what int32 indices can address");
  }

  SMLA_RETURN_IF_ERROR(c.tensor("indices", a.indices, 3, DType::kInt32));
  SMLA_RETURN_IF_ERROR(c.size_is("indices", a.indices, 0, s_q, "s_q"));
  SMLA_RETURN_IF_ERROR(c.size_is("indices", a.indices, 1, 1, "h_kv"));
  SMLA_RETURN_IF_ERROR(c.same_device("indices", a.indices, device));
  const int64_t topk = a.indices.sizes[2];
  if (topk < 1)
    return c.fail("indices.sizes[2] (topk) = " + std::to_string(topk) + " must be >= 1");

  SMLA_RETURN_IF_ERROR(check_scale(c, "sm_scale", a.sm_scale));
  SMLA_RETURN_IF_ERROR(check_d_v(c, a.d_v));
  SMLA_RETURN_IF_ERROR(check_attn_sink(c, a.attn_sink, h_q, device));
  if (a.topk_length) {
    SMLA_RETURN_IF_ERROR(c.tensor("topk_length", *a.topk_length, 1, DType::kInt32, false));
    SMLA_RETURN_IF_ERROR(c.size_is("topk_length", *a.topk_length, 0, s_q, "s_q"));
    SMLA_RETURN_IF_ERROR(c.same_device("topk_length", *a.topk_length, device));
  }

  SMLA_RETURN_IF_ERROR(c.tensor("out", a.out, 3, DType::kBFloat16));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 0, s_q, "s_q"));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 1, h_q, "h_q"));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 2, a.d_v, "d_v"));
  SMLA_RETURN_IF_ERROR(c.same_device("out", a.out, device));
  SMLA_RETURN_IF_ERROR(c.no_self_overlap("out", a.out));
  for (auto [name, t] : {std::pair{"max_logits", &a.max_logits}, std::pair{"lse", &a.lse}}) {
    SMLA_RETURN_IF_ERROR(c.tensor(name, *t, 2, DType::kFloat32, false));
    SMLA_RETURN_IF_ERROR(c.size_is(name, *t, 0, s_q, "s_q"));
    SMLA_RETURN_IF_ERROR(c.size_is(name, *t, 1, h_q, "h_q"));
    SMLA_RETURN_IF_ERROR(c.same_device(name, *t, device));
    SMLA_RETURN_IF_ERROR(c.no_self_overlap(name, *t));
  }
  if (device.is_cuda()) {
    SMLA_RETURN_IF_ERROR(c.rows_16b_aligned("q", a.q));
    SMLA_RETURN_IF_ERROR(c.rows_16b_aligned("kv", a.kv));
    SMLA_RETURN_IF_ERROR(c.rows_16b_aligned("out", a.out));
  }

  *p = PrefillParams{};
  p->problem = SparsePrefillProblem{
      s_q,   s_kv, h_q, d_qk, a.d_v, topk, a.attn_sink.has_value(), a.topk_length.has_value(),
      device};
  p->sm_scale = a.sm_scale;
  p->q = a.q.data_as<const bf16_bits>();
  p->q_stride_s = a.q.strides[0];
  p->q_stride_h = a.q.strides[1];
  p->kv = a.kv.data_as<const bf16_bits>();
  p->kv_stride_s = a.kv.strides[0];
  p->indices = a.indices.data_as<const int32_t>();
  p->indices_stride_s = a.indices.strides[0];
  if (a.attn_sink) {
    p->attn_sink = a.attn_sink->data_as<const float>();
    p->attn_sink_stride = a.attn_sink->strides[0];
  }
  if (a.topk_length) {
    p->topk_length = a.topk_length->data_as<const int32_t>();
    p->topk_length_stride = a.topk_length->strides[0];
  }
  p->out = a.out.data_as<bf16_bits>();
  p->out_stride_s = a.out.strides[0];
  p->out_stride_h = a.out.strides[1];
  p->max_logits = a.max_logits.data_as<float>();
  p->max_logits_stride_s = a.max_logits.strides[0];
  p->max_logits_stride_h = a.max_logits.strides[1];
  p->lse = a.lse.data_as<float>();
  p->lse_stride_s = a.lse.strides[0];
  p->lse_stride_h = a.lse.strides[1];
  return {};
}

namespace {

// indices [b, s_q, topk] and optional lengths [b] or [b, s_q] of one list ("" or "extra_").
Status validate_index_list(const Checker& c, const std::string& prefix, const TensorView& indices,
                           const std::optional<TensorView>& lengths, int64_t b, int64_t s_q,
                           Device device, IndexListParams* list, bool* per_token) {
  std::string ind = prefix + "indices", len = prefix + "topk_length";
  SMLA_RETURN_IF_ERROR(c.tensor(ind.c_str(), indices, 3, DType::kInt32));
  SMLA_RETURN_IF_ERROR(c.size_is(ind.c_str(), indices, 0, b, "b"));
  SMLA_RETURN_IF_ERROR(c.size_is(ind.c_str(), indices, 1, s_q, "s_q"));
  SMLA_RETURN_IF_ERROR(c.same_device(ind.c_str(), indices, device));
  if (indices.sizes[2] < 1) {
    return c.fail(ind + ".sizes[2] (topk) = " + std::to_string(indices.sizes[2]) + " must be >= 1");
  }
  *list = IndexListParams{};
  list->indices = indices.data_as<const int32_t>();
  list->indices_stride_b = indices.strides[0];
  list->indices_stride_s = indices.strides[1];
  list->topk = indices.sizes[2];
  *per_token = false;
  if (!lengths) return {};
  const TensorView& t = *lengths;
  if (t.rank != 1 && t.rank != 2) {
    return c.fail(len + " must have shape [b] or [b, s_q], got " + describe(t));
  }
  SMLA_RETURN_IF_ERROR(c.tensor(len.c_str(), t, t.rank, DType::kInt32, false));
  SMLA_RETURN_IF_ERROR(c.size_is(len.c_str(), t, 0, b, "b"));
  if (t.rank == 2) SMLA_RETURN_IF_ERROR(c.size_is(len.c_str(), t, 1, s_q, "s_q"));
  SMLA_RETURN_IF_ERROR(c.same_device(len.c_str(), t, device));
  list->topk_length = t.data_as<const int32_t>();
  list->topk_length_stride_b = t.strides[0];
  list->topk_length_stride_s = t.rank == 2 ? t.strides[1] : 0;
  *per_token = t.rank == 2;
  return {};
}

KvCacheParams cache_params(const KvCacheView& v) {
  return KvCacheParams{static_cast<const uint8_t*>(v.data),
                       v.format,
                       resolve_kv_layout(v.format, v.layout),
                       v.num_blocks,
                       v.page_block_size,
                       v.block_stride_bytes,
                       v.d_qk};
}

}  // namespace

Status validate_decode(const SparseDecodeArgs& a, DecodeParams* p) {
  Checker c("sparse_decode");
  SMLA_RETURN_IF_ERROR(c.tensor("q", a.q, 4, DType::kBFloat16));
  SMLA_RETURN_IF_ERROR(check_heads_and_dims(c, "q", a.q, 2));
  const int64_t b = a.q.sizes[0], s_q = a.q.sizes[1], h_q = a.q.sizes[2], d_qk = a.q.sizes[3];
  const Device device = a.q.device;
  if (s_q < 1) return c.fail("q.sizes[1] (s_q) = " + std::to_string(s_q) + " must be >= 1");

  SMLA_RETURN_IF_ERROR(validate_kv_cache_view("sparse_decode", "kv_cache", a.kv_cache));
  if (a.kv_cache.d_qk != d_qk) {
    return c.fail("kv_cache.d_qk = " + std::to_string(a.kv_cache.d_qk) +
                  " does not match q's d_qk = " + std::to_string(d_qk));
  }
  if (!(a.kv_cache.device == device)) {
    return c.fail("kv_cache is on " + to_string(a.kv_cache.device) + " but q is on " +
                  to_string(device));
  }

  IndexListParams main_list, extra_list;
  bool main_per_token = false, extra_per_token = false;
  SMLA_RETURN_IF_ERROR(validate_index_list(c, "", a.indices, a.topk_length, b, s_q, device,
                                           &main_list, &main_per_token));

  const bool has_extra = a.extra_kv_cache.has_value();
  if (!has_extra && a.extra_indices) {
    return c.fail("extra_indices is given without extra_kv_cache");
  }
  if (!has_extra && a.extra_topk_length) {
    return c.fail("extra_topk_length is given without extra_kv_cache");
  }
  if (has_extra) {
    if (!a.extra_indices) return c.fail("extra_kv_cache is given without extra_indices");
    const KvCacheView& e = *a.extra_kv_cache;
    if (!extra_format_allowed(a.kv_cache.format, e.format)) {
      return c.fail(std::string("extra_kv_cache.format = ") + kv_cache_format_name(e.format) +
                    " cannot go with kv_cache.format = " + kv_cache_format_name(a.kv_cache.format) +
                    " (" + extra_format_rule(a.kv_cache.format) + ")");
    }
    SMLA_RETURN_IF_ERROR(validate_kv_cache_view("sparse_decode", "extra_kv_cache", e));
    if (e.d_qk != d_qk) {
      return c.fail("extra_kv_cache.d_qk = " + std::to_string(e.d_qk) +
                    " does not match q's d_qk = " + std::to_string(d_qk));
    }
    if (!(e.device == device)) {
      return c.fail("extra_kv_cache is on " + to_string(e.device) + " but q is on " +
                    to_string(device));
    }
    SMLA_RETURN_IF_ERROR(validate_index_list(c, "extra_", *a.extra_indices, a.extra_topk_length, b,
                                             s_q, device, &extra_list, &extra_per_token));
  }

  float scale = a.softmax_scale.value_or(static_cast<float>(1.0 / std::sqrt(double(d_qk))));
  SMLA_RETURN_IF_ERROR(check_scale(c, "softmax_scale", scale));
  SMLA_RETURN_IF_ERROR(check_d_v(c, a.d_v));
  SMLA_RETURN_IF_ERROR(check_attn_sink(c, a.attn_sink, h_q, device));

  SMLA_RETURN_IF_ERROR(c.tensor("out", a.out, 4, DType::kBFloat16));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 0, b, "b"));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 1, s_q, "s_q"));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 2, h_q, "h_q"));
  SMLA_RETURN_IF_ERROR(c.size_is("out", a.out, 3, a.d_v, "d_v"));
  SMLA_RETURN_IF_ERROR(c.same_device("out", a.out, device));
  SMLA_RETURN_IF_ERROR(c.tensor("lse", a.lse, 3, DType::kFloat32, false));
  SMLA_RETURN_IF_ERROR(c.size_is("lse", a.lse, 0, b, "b"));
  SMLA_RETURN_IF_ERROR(c.size_is("lse", a.lse, 1, s_q, "s_q"));
  SMLA_RETURN_IF_ERROR(c.size_is("lse", a.lse, 2, h_q, "h_q"));
  SMLA_RETURN_IF_ERROR(c.same_device("lse", a.lse, device));
  SMLA_RETURN_IF_ERROR(c.no_self_overlap("out", a.out));
  SMLA_RETURN_IF_ERROR(c.no_self_overlap("lse", a.lse));
  if (device.is_cuda()) {
    SMLA_RETURN_IF_ERROR(c.rows_16b_aligned("q", a.q));
    SMLA_RETURN_IF_ERROR(c.rows_16b_aligned("out", a.out));
  }

  *p = DecodeParams{};
  SparseDecodeProblem& pr = p->problem;
  pr.b = b;
  pr.s_q = s_q;
  pr.h_q = h_q;
  pr.d_qk = d_qk;
  pr.d_v = a.d_v;
  pr.topk = main_list.topk;
  pr.format = a.kv_cache.format;
  pr.kv_layout = resolve_kv_layout(a.kv_cache.format, a.kv_cache.layout);
  pr.page_block_size = a.kv_cache.page_block_size;
  pr.has_topk_length = a.topk_length.has_value();
  pr.topk_length_per_token = main_per_token;
  pr.has_attn_sink = a.attn_sink.has_value();
  pr.has_extra = has_extra;
  pr.extra_topk = has_extra ? extra_list.topk : 0;
  if (has_extra) {
    pr.extra_format = a.extra_kv_cache->format;
    pr.extra_kv_layout = resolve_kv_layout(a.extra_kv_cache->format, a.extra_kv_cache->layout);
  }
  pr.extra_page_block_size = has_extra ? a.extra_kv_cache->page_block_size : 0;
  pr.has_extra_topk_length = a.extra_topk_length.has_value();
  pr.extra_topk_length_per_token = extra_per_token;
  pr.device = device;

  p->softmax_scale = scale;
  p->q = a.q.data_as<const bf16_bits>();
  p->q_stride_b = a.q.strides[0];
  p->q_stride_s = a.q.strides[1];
  p->q_stride_h = a.q.strides[2];
  p->cache = cache_params(a.kv_cache);
  p->list = main_list;
  p->has_extra = has_extra;
  if (has_extra) {
    p->extra_cache = cache_params(*a.extra_kv_cache);
    p->extra_list = extra_list;
  }
  if (a.attn_sink) {
    p->attn_sink = a.attn_sink->data_as<const float>();
    p->attn_sink_stride = a.attn_sink->strides[0];
  }
  p->out = a.out.data_as<bf16_bits>();
  p->out_stride_b = a.out.strides[0];
  p->out_stride_s = a.out.strides[1];
  p->out_stride_h = a.out.strides[2];
  p->lse = a.lse.data_as<float>();
  p->lse_stride_b = a.lse.strides[0];
  p->lse_stride_s = a.lse.strides[1];
  p->lse_stride_h = a.lse.strides[2];
  return {};
}

namespace {

struct NamedRange {
  const char* name;
  ByteRange range;
};

std::string range_text(const ByteRange& r) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "[" + std::string&&.
  std::string text = "[";
  text += Checker::pointer_text(reinterpret_cast<const void*>(r.begin));
  text += ", ";
  text += Checker::pointer_text(reinterpret_cast<const void*>(r.end));
  text += ")";
  return text;
}

// Every output against every input and against the outputs before it.
Status check_disjoint(const char* op, std::initializer_list<NamedRange> outputs,
                      std::initializer_list<NamedRange> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    auto refuse = [&](const NamedRange& other, const char* what) {
      return invalid_argument(std::string(op) + ": " + out->name + " (bytes " +
                              range_text(out->range) + ") overlaps " + what + " " + other.name +
                              " (bytes " + range_text(other.range) +
                              "): outputs must not share memory with inputs or other outputs");
    };
    for (const NamedRange& in : inputs) {
      if (out->range.overlaps(in.range)) return refuse(in, "input");
    }
    for (auto prev = outputs.begin(); prev != out; ++prev) {
      if (out->range.overlaps(prev->range)) return refuse(*prev, "output");
    }
  }
  return {};
}

ByteRange optional_range(const std::optional<TensorView>& t) {
  return t ? byte_range(*t) : ByteRange{};
}

}  // namespace

Status validate_no_aliasing(const SparsePrefillArgs& a) {
  return check_disjoint("sparse_prefill",
                        {{"out", byte_range(a.out)},
                         {"max_logits", byte_range(a.max_logits)},
                         {"lse", byte_range(a.lse)}},
                        {{"q", byte_range(a.q)},
                         {"kv", byte_range(a.kv)},
                         {"indices", byte_range(a.indices)},
                         {"attn_sink", optional_range(a.attn_sink)},
                         {"topk_length", optional_range(a.topk_length)}});
}

Status validate_no_aliasing(const SparseDecodeArgs& a) {
  return check_disjoint(
      "sparse_decode", {{"out", byte_range(a.out)}, {"lse", byte_range(a.lse)}},
      {{"q", byte_range(a.q)},
       {"kv_cache", byte_range(a.kv_cache)},
       {"indices", byte_range(a.indices)},
       {"topk_length", optional_range(a.topk_length)},
       {"attn_sink", optional_range(a.attn_sink)},
       {"extra_kv_cache", a.extra_kv_cache ? byte_range(*a.extra_kv_cache) : ByteRange{}},
       {"extra_indices", optional_range(a.extra_indices)},
       {"extra_topk_length", optional_range(a.extra_topk_length)}});
}

Status validate_run_options(const char* op, const RunOptions& options) {
  switch (options.backend) {
    case Backend::kAuto:
    case Backend::kCpu:
    case Backend::kCuda:
    case Backend::kReference:
      break;
    default:
      return invalid_argument(std::string(op) + ": options.backend = " +
                              std::to_string(static_cast<int>(options.backend)) +
                              " is not a back end (auto, cpu, cuda or reference)");
  }
  if (options.num_threads < 0) {
    return invalid_argument(std::string(op) +
                            ": options.num_threads = " + std::to_string(options.num_threads) +
                            " must be >= 0 (0 = every hardware thread)");
  }
  return {};
}

}  // namespace sparse_mla::detail
