// Reference verification of prefill and decode outputs, whole or on an evenly spaced subset of
// queries (reference_check.h). The subset is a strided view of the case's own inputs, so the
// reference reads exactly the bytes the back end read.
#include "reference_check.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "verify/check.h"
#include "verify/compare.h"

namespace sparse_mla::cli {

namespace {

// Every `stride`-th entry of dimension `dim`, from the first (rank-1 views ignore dim 1).
TensorView every_nth(TensorView v, int64_t stride, int dim = 0) {
  if (dim >= v.rank) return v;
  v.sizes[dim] = (v.sizes[dim] + stride - 1) / stride;
  v.strides[dim] *= stride;
  return v;
}

std::optional<TensorView> every_nth(const std::optional<TensorView>& v, int64_t stride,
                                    int dim = 0) {
  if (!v) return std::nullopt;
  return every_nth(*v, stride, dim);
}

// Rows i*stride of a contiguous [count, row] tensor.
template <typename T>
std::vector<T> pick_rows(const std::vector<T>& all, int64_t row, int64_t stride, int64_t picked) {
  std::vector<T> rows;
  rows.reserve(static_cast<size_t>(row * picked));
  for (int64_t i = 0; i < picked; ++i) {
    auto begin = all.begin() + i * stride * row;
    rows.insert(rows.end(), begin, begin + row);
  }
  return rows;
}

void merge(const verify::CompareResult& r, bool is_out, VerifyResult* result) {
  if (is_out) {
    result->out_max_abs_err = r.max_abs_err;
    result->out_cos_diff = r.cos_diff;
  }
  if (!r.ok && result->ok) {
    result->ok = false;
    result->message = r.message;
  }
}

std::string summary(const VerifyResult& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "out max abs err %.3g, cos diff %.3g", r.out_max_abs_err,
                r.out_cos_diff);
  return buf;
}

}  // namespace

int64_t subset_stride(int64_t count, double total_flop, double budget_flop) {
  if (count <= 1 || total_flop <= budget_flop || budget_flop <= 0) return 1;
  const double per_query = total_flop / static_cast<double>(count);
  const int64_t affordable = std::max<int64_t>(1, static_cast<int64_t>(budget_flop / per_query));
  // Picking every stride-th of count entries checks ceil(count / stride) of them.
  return std::min<int64_t>(count, (count + affordable - 1) / affordable);
}

Status verify_prefill(const verify::PrefillCase& c, const verify::PrefillOutputs& got,
                      int64_t stride, VerifyResult* result) {
  *result = VerifyResult{};
  result->total = c.problem.s_q;
  SparsePrefillProblem sub = c.problem;
  sub.s_q = (c.problem.s_q + stride - 1) / stride;
  result->checked = sub.s_q;

  verify::PrefillOutputs expected;
  verify::allocate_outputs(sub, &expected);
  SparsePrefillArgs args = c.args(expected.out_view, expected.max_logits_view, expected.lse_view);
  args.q = every_nth(args.q, stride);
  args.indices = every_nth(args.indices, stride);
  args.topk_length = every_nth(args.topk_length, stride);
  RunOptions reference;
  reference.backend = Backend::kReference;
  SMLA_RETURN_IF_ERROR(sparse_prefill(args, reference));

  const int64_t h_q = c.problem.h_q, d_v = c.problem.d_v;
  result->ok = true;
  merge(verify::compare_bf16("out", pick_rows(got.out, h_q * d_v, stride, sub.s_q), expected.out,
                             verify::kPrefillOut),
        true, result);
  merge(verify::compare("max_logits", pick_rows(got.max_logits, h_q, stride, sub.s_q),
                        expected.max_logits, verify::kPrefillStats),
        false, result);
  merge(verify::compare("lse", pick_rows(got.lse, h_q, stride, sub.s_q), expected.lse,
                        verify::kPrefillStats),
        false, result);
  if (result->ok) result->message = summary(*result);
  return {};
}

void decode_subset_strides(int64_t b, int64_t s_q, double total_flop, double budget_flop,
                           int64_t* stride_b, int64_t* stride_s) {
  *stride_b = subset_stride(b, total_flop, budget_flop);
  *stride_s = 1;
  const double per_request = total_flop / static_cast<double>(std::max<int64_t>(b, 1));
  if (*stride_b >= b && per_request > budget_flop) {
    *stride_s = subset_stride(s_q, per_request, budget_flop);
  }
}

Status verify_decode(const verify::DecodeCase& c, const verify::DecodeOutputs& got,
                     int64_t stride_b, int64_t stride_s, VerifyResult* result) {
  *result = VerifyResult{};
  const SparseDecodeProblem& p = c.problem;
  const int64_t picked_b = (p.b + stride_b - 1) / stride_b;
  const int64_t picked_s = (p.s_q + stride_s - 1) / stride_s;
  result->total = p.b * p.s_q;
  result->checked = picked_b * picked_s;

  SparseDecodeProblem shape = p;
  shape.b = picked_b;
  shape.s_q = picked_s;
  verify::DecodeOutputs expected;
  verify::allocate_outputs(shape, &expected);
  SparseDecodeArgs args = c.args(expected.out_view, expected.lse_view);
  args.q = every_nth(every_nth(args.q, stride_b), stride_s, 1);
  args.indices = every_nth(every_nth(args.indices, stride_b), stride_s, 1);
  // [b] or [b, s_q] lengths: dimension 1 exists only in the per-token form.
  args.topk_length = every_nth(every_nth(args.topk_length, stride_b), stride_s, 1);
  args.extra_indices = every_nth(every_nth(args.extra_indices, stride_b), stride_s, 1);
  args.extra_topk_length = every_nth(every_nth(args.extra_topk_length, stride_b), stride_s, 1);

  RunOptions reference;
  reference.backend = Backend::kReference;
  SMLA_RETURN_IF_ERROR(verify::plan_and_run_decode(args, reference));

  // The picked queries' rows of the back end's contiguous [b, s_q, h_q, ...] outputs.
  const int64_t out_row = p.h_q * p.d_v, lse_row = p.h_q;
  std::vector<uint16_t> got_out;
  std::vector<float> got_lse;
  for (int64_t i = 0; i < picked_b; ++i) {
    for (int64_t j = 0; j < picked_s; ++j) {
      const int64_t query = i * stride_b * p.s_q + j * stride_s;
      got_out.insert(got_out.end(), got.out.begin() + query * out_row,
                     got.out.begin() + (query + 1) * out_row);
      got_lse.insert(got_lse.end(), got.lse.begin() + query * lse_row,
                     got.lse.begin() + (query + 1) * lse_row);
    }
  }
  result->ok = true;
  merge(verify::compare_bf16("out", got_out, expected.out, verify::kDecodeOut), true, result);
  merge(verify::compare("lse", got_lse, expected.lse, verify::kDecodeLse), false, result);
  if (result->ok) result->message = summary(*result);
  return {};
}

}  // namespace sparse_mla::cli
