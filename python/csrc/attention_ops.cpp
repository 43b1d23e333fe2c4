// sparse_prefill, plan_decode and sparse_decode as torch operators: tensors -> views, the
// public API call on the tensors' device and torch's current stream, Status -> exception.
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <cmath>
#include <limits>

#include "ops.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"
#include "torch_adapter.h"

namespace sparse_mla::python {
namespace {

// int64 -> int without wrapping: values outside int become INT_MIN/INT_MAX, which validation
// rejects with the caller's value in range terms.
int saturate_int(int64_t v) {
  if (v < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  if (v > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  return static_cast<int>(v);
}

std::optional<KvCacheView> to_optional_cache_view(const char* op, const char* name,
                                                  const std::optional<at::Tensor>& t,
                                                  std::optional<std::string_view> format) {
  if (!t.has_value()) return std::nullopt;
  return to_cache_view(op, name, *t, format);
}

// The decode arguments without outputs (out/lse are set by the caller).
SparseDecodeArgs decode_inputs(const char* op, const at::Tensor& q, const at::Tensor& kv_cache,
                               const at::Tensor& indices,
                               const std::optional<at::Tensor>& topk_length,
                               const std::optional<at::Tensor>& attn_sink,
                               const std::optional<at::Tensor>& extra_kv_cache,
                               const std::optional<at::Tensor>& extra_indices,
                               const std::optional<at::Tensor>& extra_topk_length,
                               std::optional<std::string_view> kv_format, int64_t d_v) {
  SparseDecodeArgs args;
  args.q = to_view(op, "q", q);
  args.kv_cache = to_cache_view(op, "kv_cache", kv_cache, kv_format);
  args.indices = to_view(op, "indices", indices);
  args.topk_length = to_view(op, "topk_length", topk_length);
  args.attn_sink = to_view(op, "attn_sink", attn_sink);
  // The extra cache has the main cache's format (validation checks it when a format is inferred).
  args.extra_kv_cache = to_optional_cache_view(op, "extra_kv_cache", extra_kv_cache, kv_format);
  args.extra_indices = to_view(op, "extra_indices", extra_indices);
  args.extra_topk_length = to_view(op, "extra_topk_length", extra_topk_length);
  args.d_v = saturate_int(d_v);
  return args;
}

DecodePlan make_plan(const SparseDecodeArgs& args, const RunOptions& options) {
  SparseDecodeProblem problem;
  throw_if_error(describe_sparse_decode(args, &problem));
  DecodePlan plan;
  throw_if_error(plan_sparse_decode(problem, &plan, options));
  return plan;
}

}  // namespace

void sparse_prefill(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& indices,
                    double sm_scale, int64_t d_v, const std::optional<at::Tensor>& attn_sink,
                    const std::optional<at::Tensor>& topk_length, at::Tensor& out,
                    at::Tensor& max_logits, at::Tensor& lse) {
  constexpr const char* kOp = "sparse_prefill";
  SparsePrefillArgs args;
  args.q = to_view(kOp, "q", q);
  args.kv = to_view(kOp, "kv", kv);
  args.indices = to_view(kOp, "indices", indices);
  args.sm_scale = static_cast<float>(sm_scale);
  args.d_v = saturate_int(d_v);
  args.attn_sink = to_view(kOp, "attn_sink", attn_sink);
  args.topk_length = to_view(kOp, "topk_length", topk_length);
  args.out = to_view(kOp, "out", out);
  args.max_logits = to_view(kOp, "max_logits", max_logits);
  args.lse = to_view(kOp, "lse", lse);
  const c10::DeviceGuard guard(q.device());
  throw_if_error(sparse_mla::sparse_prefill(args, run_options_for(q.device())));
}

std::tuple<int64_t, int64_t, std::string, std::string, std::string> plan_decode(
    const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
    const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& extra_kv_cache, const std::optional<at::Tensor>& extra_indices,
    const std::optional<at::Tensor>& extra_topk_length, std::optional<std::string_view> kv_format,
    int64_t d_v) {
  constexpr const char* kOp = "plan_decode";
  SparseDecodeArgs args =
      decode_inputs(kOp, q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                    extra_indices, extra_topk_length, kv_format, d_v);
  // A plan depends on shapes only. The outputs' views carry the right shapes and a placeholder
  // address that validation checks for alignment and nothing reads.
  alignas(16) static const unsigned char placeholder[16] = {};
  void* address = const_cast<unsigned char*>(placeholder);
  const int64_t b = q.dim() == 4 ? q.size(0) : 0, s_q = q.dim() == 4 ? q.size(1) : 0;
  const int64_t h_q = q.dim() == 4 ? q.size(2) : 0;
  args.out =
      TensorView::contiguous(address, DType::kBFloat16, {b, s_q, h_q, args.d_v}, args.q.device);
  args.lse = TensorView::contiguous(address, DType::kFloat32, {b, s_q, h_q}, args.q.device);
  const c10::DeviceGuard guard(q.device());
  DecodePlan plan = make_plan(args, run_options_for(q.device()));
  return {static_cast<int64_t>(plan.workspace_bytes), plan.num_sm_parts, backend_name(plan.backend),
          plan.kernel, plan.reason};
}

void sparse_decode(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                   const std::optional<at::Tensor>& topk_length,
                   const std::optional<at::Tensor>& attn_sink,
                   const std::optional<at::Tensor>& extra_kv_cache,
                   const std::optional<at::Tensor>& extra_indices,
                   const std::optional<at::Tensor>& extra_topk_length,
                   std::optional<std::string_view> kv_format, std::optional<double> softmax_scale,
                   int64_t d_v, const std::optional<at::Tensor>& workspace, bool reuse_schedule,
                   at::Tensor& out, at::Tensor& lse) {
  constexpr const char* kOp = "sparse_decode";
  SparseDecodeArgs args =
      decode_inputs(kOp, q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
                    extra_indices, extra_topk_length, kv_format, d_v);
  if (softmax_scale.has_value()) args.softmax_scale = static_cast<float>(*softmax_scale);
  args.out = to_view(kOp, "out", out);
  args.lse = to_view(kOp, "lse", lse);

  const c10::DeviceGuard guard(q.device());
  const RunOptions options = run_options_for(q.device());
  // Planning is host-side and deterministic, so re-planning here gives the plan the caller
  // sized `workspace` with.
  const DecodePlan plan = make_plan(args, options);

  at::Tensor buffer;
  if (workspace.has_value()) {
    buffer = *workspace;
    const std::string prefix = std::string(kOp) + ": workspace";
    TORCH_CHECK_VALUE(buffer.device() == q.device(), prefix, " is on ", buffer.device().str(),
                      " but q is on ", q.device().str());
    TORCH_CHECK_VALUE(buffer.scalar_type() == at::kByte && buffer.is_contiguous(), prefix,
                      " must be a contiguous uint8 tensor, got ", buffer.scalar_type());
  } else {
    TORCH_CHECK_VALUE(!reuse_schedule || plan.workspace_bytes == 0, kOp,
                      ": reuse_schedule is set but no workspace holding a schedule was given");
    if (plan.workspace_bytes > 0) {
      buffer =
          at::empty({static_cast<int64_t>(plan.workspace_bytes)}, q.options().dtype(at::kByte));
    }
  }
  void* workspace_ptr = buffer.defined() ? buffer.data_ptr() : nullptr;
  const size_t workspace_bytes = buffer.defined() ? static_cast<size_t>(buffer.nbytes()) : 0;
  throw_if_error(sparse_mla::sparse_decode(
      args, plan, workspace_ptr, workspace_bytes,
      reuse_schedule ? DecodeSchedule::kReuse : DecodeSchedule::kBuild, options));
}

}  // namespace sparse_mla::python
