// Host runs of recipe cases and the SPEC §5 output checks (check.h).
#include "verify/check.h"

#include <cstring>

namespace sparse_mla::verify {

std::vector<float> view_to_floats(const TensorView& v) {
  std::vector<float> out;
  out.reserve(v.numel());
  std::array<int64_t, kMaxRank> sizes{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const int pad = kMaxRank - v.rank;  // leading size-1 dims
  for (int d = 0; d < v.rank; ++d) {
    sizes[pad + d] = v.sizes[d];
    strides[pad + d] = v.strides[d];
  }
  for (int64_t a = 0; a < sizes[0]; ++a) {
    for (int64_t b = 0; b < sizes[1]; ++b) {
      for (int64_t c = 0; c < sizes[2]; ++c) {
        for (int64_t d = 0; d < sizes[3]; ++d) {
          const int64_t offset = a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3];
          if (v.dtype == DType::kBFloat16) {
            out.push_back(bf16_to_float(static_cast<const uint16_t*>(v.data)[offset]));
          } else {
            out.push_back(static_cast<const float*>(v.data)[offset]);
          }
        }
      }
    }
  }
  return out;
}

Status run_host(const PrefillCase& c, const RunOptions& options, PrefillOutputs* out,
                bool padded_outputs) {
  if (out == nullptr) return invalid_argument("run_host: out is null");
  allocate_outputs(c.problem, out, padded_outputs);
  return sparse_prefill(c.args(out->out_view, out->max_logits_view, out->lse_view), options);
}

Status run_host(const DecodeCase& c, const RunOptions& options, DecodeOutputs* out,
                bool padded_outputs) {
  if (out == nullptr) return invalid_argument("run_host: out is null");
  allocate_outputs(c.problem, out, padded_outputs);
  return plan_and_run_decode(c.args(out->out_view, out->lse_view), options);
}

Status plan_and_run_decode(const SparseDecodeArgs& args, const RunOptions& options,
                           Device workspace_device) {
  SparseDecodeProblem problem;
  SMLA_RETURN_IF_ERROR(describe_sparse_decode(args, &problem));
  DecodePlan plan;
  SMLA_RETURN_IF_ERROR(plan_sparse_decode(problem, &plan, options));
  Buffer workspace;
  SMLA_RETURN_IF_ERROR(Buffer::allocate(workspace_device, plan.workspace_bytes, &workspace));
  return sparse_decode(args, plan, workspace.data(), plan.workspace_bytes, DecodeSchedule::kBuild,
                       options);
}

Status run_reference(const PrefillCase& c, PrefillOutputs* expected) {
  RunOptions options;
  options.backend = Backend::kReference;
  return run_host(c, options, expected);
}

Status run_reference(const DecodeCase& c, DecodeOutputs* expected) {
  RunOptions options;
  options.backend = Backend::kReference;
  return run_host(c, options, expected);
}

namespace {
void add(CheckReport* report, CompareResult result) {
  report->ok = report->ok && result.ok;
  if (!report->message.empty()) report->message += "\n";
  report->message += result.message;
  report->results.push_back(std::move(result));
}
}  // namespace

CheckReport check_prefill(const PrefillOutputs& got, const PrefillOutputs& expected) {
  CheckReport report;
  add(&report,
      compare("out", view_to_floats(got.out_view), view_to_floats(expected.out_view), kPrefillOut));
  add(&report, compare("max_logits", view_to_floats(got.max_logits_view),
                       view_to_floats(expected.max_logits_view), kPrefillStats));
  add(&report, compare("lse", view_to_floats(got.lse_view), view_to_floats(expected.lse_view),
                       kPrefillStats));
  return report;
}

CheckReport check_decode(const DecodeOutputs& got, const DecodeOutputs& expected) {
  CheckReport report;
  add(&report,
      compare("out", view_to_floats(got.out_view), view_to_floats(expected.out_view), kDecodeOut));
  add(&report,
      compare("lse", view_to_floats(got.lse_view), view_to_floats(expected.lse_view), kDecodeLse));
  return report;
}

}  // namespace sparse_mla::verify
