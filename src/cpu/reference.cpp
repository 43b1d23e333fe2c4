// The reference (reference.h): for every query, gather the rows of its valid slots (bf16 rows for
// prefill, dequantized cache rows for decode, main list then extra list), then for every head
// evaluate the SPEC formulas in double:
//   s_k = scale * dot(q, K_k);  max_logits = max_k s_k;  lse = ln(sum_k exp(s_k))
//   out = sum_k exp(s_k - lse) * V_k,  then  out *= 1 / (1 + exp(sink - lse))
// A query without valid slots gets out 0, lse +inf, max_logits -inf.
#include "cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/fp8.h"

namespace sparse_mla::cpu {
namespace {

using detail::bf16_bits;
constexpr int kDv = 512;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The rows one query attends to, in slot order, duplicates repeated: [count, d_qk] fp32.
struct GatheredRows {
  int d_qk = 0;
  int64_t count = 0;
  std::vector<float> values;

  float* append() {
    values.resize((count + 1) * d_qk);
    return &values[count++ * d_qk];
  }
  const float* row(int64_t k) const { return &values[k * d_qk]; }
};

struct HeadResult {
  double out[kDv];
  double lse;
  double max_logit;
};

// SPEC §2 for one head of one query; `q` is [d_qk] bf16, `sink` may be null.
void attend_one_head(const bf16_bits* q, const GatheredRows& rows, double scale, const float* sink,
                     HeadResult* r) {
  for (double& o : r->out) o = 0.0;
  if (rows.count == 0) {
    r->lse = kInf;
    r->max_logit = -kInf;
    return;
  }
  std::vector<double> scores(rows.count);
  double max_score = -kInf;
  for (int64_t k = 0; k < rows.count; ++k) {
    const float* kv = rows.row(k);
    double dot = 0.0;
    for (int d = 0; d < rows.d_qk; ++d) dot += double(bf16_to_float_inline(q[d])) * kv[d];
    scores[k] = scale * dot;
    max_score = std::max(max_score, scores[k]);
  }
  double sum = 0.0;
  for (double s : scores) sum += std::exp(s - max_score);
  r->lse = max_score + std::log(sum);
  r->max_logit = max_score;
  for (int64_t k = 0; k < rows.count; ++k) {
    const double p = std::exp(scores[k] - r->lse);
    const float* v = rows.row(k);
    for (int d = 0; d < kDv; ++d) r->out[d] += p * v[d];
  }
  if (sink != nullptr) {
    const double factor = 1.0 / (1.0 + std::exp(double(*sink) - r->lse));  // +inf sink -> 0
    for (double& o : r->out) o *= factor;
  }
}

void write_out(const HeadResult& r, bf16_bits* out) {
  for (int d = 0; d < kDv; ++d) out[d] = float_to_bf16_inline(static_cast<float>(r.out[d]));
}

}  // namespace

Status reference_sparse_prefill(const detail::PrefillParams& p) {
  const SparsePrefillProblem& pr = p.problem;
  const int d_qk = static_cast<int>(pr.d_qk);
  GatheredRows rows;
  rows.d_qk = d_qk;
  HeadResult result;
  for (int64_t i = 0; i < pr.s_q; ++i) {
    // Valid slots: inside topk_length and 0 <= index < s_kv.
    const int64_t length = detail::effective_topk(p, i);
    rows.count = 0;
    const int32_t* list = p.indices + i * p.indices_stride_s;
    for (int64_t k = 0; k < length; ++k) {
      const int32_t idx = list[k];
      if (idx < 0 || idx >= pr.s_kv) continue;
      const bf16_bits* kv = p.kv + idx * p.kv_stride_s;
      float* row = rows.append();
      for (int d = 0; d < d_qk; ++d) row[d] = bf16_to_float_inline(kv[d]);
    }
    for (int64_t h = 0; h < pr.h_q; ++h) {
      const float* sink = p.attn_sink != nullptr ? p.attn_sink + h * p.attn_sink_stride : nullptr;
      attend_one_head(p.q + i * p.q_stride_s + h * p.q_stride_h, rows, p.sm_scale, sink, &result);
      write_out(result, p.out + i * p.out_stride_s + h * p.out_stride_h);
      p.lse[i * p.lse_stride_s + h * p.lse_stride_h] = static_cast<float>(result.lse);
      p.max_logits[i * p.max_logits_stride_s + h * p.max_logits_stride_h] =
          static_cast<float>(result.max_logit);
    }
  }
  return {};
}

Status reference_sparse_decode(const detail::DecodeParams& p) {
  const SparseDecodeProblem& pr = p.problem;
  GatheredRows rows;
  rows.d_qk = static_cast<int>(pr.d_qk);
  HeadResult result;
  // Appends the dequantized rows of one list's valid slots for query (b, s).
  auto gather = [&rows](const detail::KvCacheParams& cache, const detail::IndexListParams& list,
                        int64_t b, int64_t s) {
    const KvTokenReader reader(cache);
    const int64_t length = detail::effective_topk(list, b, s);
    const int32_t* indices = list.indices + b * list.indices_stride_b + s * list.indices_stride_s;
    for (int64_t k = 0; k < length; ++k) {
      const int32_t slot = indices[k];
      if (slot < 0 || slot >= cache.num_slots()) continue;
      reader.read(slot, rows.append());
    }
  };
  for (int64_t b = 0; b < pr.b; ++b) {
    for (int64_t s = 0; s < pr.s_q; ++s) {
      rows.count = 0;
      gather(p.cache, p.list, b, s);
      if (p.has_extra) gather(p.extra_cache, p.extra_list, b, s);
      for (int64_t h = 0; h < pr.h_q; ++h) {
        const float* sink = p.attn_sink != nullptr ? p.attn_sink + h * p.attn_sink_stride : nullptr;
        attend_one_head(p.q + b * p.q_stride_b + s * p.q_stride_s + h * p.q_stride_h, rows,
                        p.softmax_scale, sink, &result);
        write_out(result, p.out + b * p.out_stride_b + s * p.out_stride_s + h * p.out_stride_h);
        p.lse[b * p.lse_stride_b + s * p.lse_stride_s + h * p.lse_stride_h] =
            static_cast<float>(result.lse);
      }
    }
  }
  return {};
}

}  // namespace sparse_mla::cpu
