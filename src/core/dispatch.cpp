// The public entry points: validate, pick the back end and the kernel variant, run.
// Kernel choice walks the back end's table (kernel_variant.h) and takes the first variant that
// supports the problem, or the variant named in RunOptions::kernel.
#include <span>
#include <string>

#include "core/kernel_variant.h"
#include "core/validate.h"
#include "sparse_mla/kernel_registry.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"

namespace sparse_mla {
namespace detail {
namespace {

// Auto resolves to the device the tensors live on; explicit choices must match it.
Status resolve_backend(const char* op, Backend requested, Device device, Backend* out) {
  if (requested == Backend::kAuto) {
    *out = device.is_cuda() ? Backend::kCuda : Backend::kCpu;
  } else {
    *out = requested;
  }
  const bool wants_cuda = *out == Backend::kCuda;
  if (wants_cuda != device.is_cuda()) {
    return invalid_argument(std::string(op) + ": back end " + backend_name(*out) +
                            " cannot run on tensors on " + to_string(device));
  }
  if (wants_cuda && !cuda_available()) {
    return unsupported(std::string(op) +
                       ": tensors are on CUDA but no CUDA device is available to this build");
  }
  return {};
}

template <typename Kernel>
std::span<const Kernel> table_for(Backend backend);

template <>
std::span<const PrefillKernel> table_for<PrefillKernel>(Backend backend) {
  switch (backend) {
    case Backend::kReference: return reference_prefill_kernels();
    case Backend::kCpu: return cpu_prefill_kernels();
    case Backend::kCuda: return cuda_prefill_kernels();
    case Backend::kAuto: break;
  }
  return {};
}

template <>
std::span<const DecodeKernel> table_for<DecodeKernel>(Backend backend) {
  switch (backend) {
    case Backend::kReference: return reference_decode_kernels();
    case Backend::kCpu: return cpu_decode_kernels();
    case Backend::kCuda: return cuda_decode_kernels();
    case Backend::kAuto: break;
  }
  return {};
}

// Picks the kernel: the one named in `name` (must support the problem), else the first that does.
template <typename Kernel, typename Problem>
Status select_kernel(const char* op, Backend backend, const Problem& problem,
                     const std::string& name, const Kernel** out) {
  std::span<const Kernel> table = table_for<Kernel>(backend);
  std::string reasons;
  for (const Kernel& k : table) {
    if (!name.empty() && name != k.name) continue;
    std::string why_not;
    if (k.supports(problem, &why_not)) {
      *out = &k;
      return {};
    }
    reasons += std::string(reasons.empty() ? "" : "; ") + k.name + ": " + why_not;
  }
  if (!name.empty() && reasons.empty()) {
    return invalid_argument(std::string(op) + ": options.kernel = \"" + name +
                            "\" is not a kernel of back end " + backend_name(backend));
  }
  if (reasons.empty()) {
    return unsupported(std::string(op) + ": back end " + backend_name(backend) +
                       " has no kernels in this build");
  }
  return unsupported(std::string(op) + ": no kernel of back end " + backend_name(backend) +
                     " supports this problem (" + reasons + ")");
}

template <typename Kernel, typename Problem>
std::vector<KernelAvailability> list_kernels(Operation op, const Problem& problem) {
  std::vector<KernelAvailability> result;
  for (Backend backend : {Backend::kCuda, Backend::kCpu, Backend::kReference}) {
    for (const Kernel& k : table_for<Kernel>(backend)) {
      KernelAvailability a{k.name, backend, op, false, ""};
      std::string why_not;
      if (backend == Backend::kCuda && !cuda_available()) {
        a.why_not = "no CUDA device is visible";
      } else if ((backend == Backend::kCuda) != problem.device.is_cuda()) {
        a.why_not = "tensors are on " + to_string(problem.device);
      } else if (!k.supports(problem, &why_not)) {
        a.why_not = why_not;
      } else {
        a.usable = true;
      }
      result.push_back(std::move(a));
    }
  }
  return result;
}

// Names the first field in which two problems differ, for the plan-mismatch error.
std::string first_difference(const SparseDecodeProblem& a, const SparseDecodeProblem& b) {
  auto num = [](const char* name, int64_t x, int64_t y) {
    return std::string(name) + " " + std::to_string(x) + " (plan) vs " + std::to_string(y);
  };
  if (a.b != b.b) return num("b", a.b, b.b);
  if (a.s_q != b.s_q) return num("s_q", a.s_q, b.s_q);
  if (a.h_q != b.h_q) return num("h_q", a.h_q, b.h_q);
  if (a.d_qk != b.d_qk) return num("d_qk", a.d_qk, b.d_qk);
  if (a.topk != b.topk) return num("topk", a.topk, b.topk);
  if (a.extra_topk != b.extra_topk) return num("extra_topk", a.extra_topk, b.extra_topk);
  if (a.page_block_size != b.page_block_size) {
    return num("page_block_size", a.page_block_size, b.page_block_size);
  }
  if (a.extra_page_block_size != b.extra_page_block_size) {
    return num("extra_page_block_size", a.extra_page_block_size, b.extra_page_block_size);
  }
  if (a.format != b.format) return "format";
  if (a.has_extra != b.has_extra) return "presence of extra_kv_cache";
  if (a.has_topk_length != b.has_topk_length) return "presence of topk_length";
  if (a.topk_length_per_token != b.topk_length_per_token) return "shape of topk_length";
  if (a.has_extra_topk_length != b.has_extra_topk_length) {
    return "presence of extra_topk_length";
  }
  if (a.extra_topk_length_per_token != b.extra_topk_length_per_token) {
    return "shape of extra_topk_length";
  }
  if (a.has_attn_sink != b.has_attn_sink) return "presence of attn_sink";
  if (!(a.device == b.device)) return "device " + to_string(a.device) + " vs " + to_string(b.device);
  return "";
}

}  // namespace
}  // namespace detail

Status sparse_prefill(const SparsePrefillArgs& args, const RunOptions& options) {
  detail::PrefillParams params;
  SMLA_RETURN_IF_ERROR(detail::validate_prefill(args, &params));
  Backend backend;
  SMLA_RETURN_IF_ERROR(
      detail::resolve_backend("sparse_prefill", options.backend, params.problem.device, &backend));
  const detail::PrefillKernel* kernel = nullptr;
  SMLA_RETURN_IF_ERROR(detail::select_kernel("sparse_prefill", backend, params.problem,
                                             options.kernel, &kernel));
  if (params.problem.s_q == 0) return {};
  return kernel->run(params, options);
}

Status describe_sparse_decode(const SparseDecodeArgs& args, SparseDecodeProblem* problem) {
  if (problem == nullptr) return invalid_argument("describe_sparse_decode: problem is null");
  detail::DecodeParams params;
  SMLA_RETURN_IF_ERROR(detail::validate_decode(args, &params));
  *problem = params.problem;
  return {};
}

Status plan_sparse_decode(const SparseDecodeProblem& problem, DecodePlan* plan,
                          const RunOptions& options) {
  if (plan == nullptr) return invalid_argument("plan_sparse_decode: plan is null");
  SMLA_RETURN_IF_ERROR(detail::validate_decode_problem(problem));
  Backend backend;
  SMLA_RETURN_IF_ERROR(
      detail::resolve_backend("plan_sparse_decode", options.backend, problem.device, &backend));
  const detail::DecodeKernel* kernel = nullptr;
  SMLA_RETURN_IF_ERROR(
      detail::select_kernel("plan_sparse_decode", backend, problem, options.kernel, &kernel));
  DecodePlan result;
  result.problem = problem;
  result.backend = backend;
  result.kernel = kernel->name;
  SMLA_RETURN_IF_ERROR(kernel->plan(problem, options, &result));
  *plan = std::move(result);
  return {};
}

Status sparse_decode(const SparseDecodeArgs& args, const DecodePlan& plan, void* workspace,
                     size_t workspace_bytes, DecodeSchedule schedule, const RunOptions& options) {
  detail::DecodeParams params;
  SMLA_RETURN_IF_ERROR(detail::validate_decode(args, &params));
  if (!(params.problem == plan.problem)) {
    return invalid_argument("sparse_decode: the arguments do not match the plan: " +
                            detail::first_difference(plan.problem, params.problem));
  }
  if (workspace_bytes < plan.workspace_bytes) {
    return invalid_argument("sparse_decode: workspace_bytes = " + std::to_string(workspace_bytes) +
                            " is smaller than plan.workspace_bytes = " +
                            std::to_string(plan.workspace_bytes));
  }
  if (plan.workspace_bytes > 0 && workspace == nullptr) {
    return invalid_argument("sparse_decode: workspace is null but the plan needs " +
                            std::to_string(plan.workspace_bytes) + " bytes");
  }
  // A plan is plain data: check its back end against the tensors again, as planning did.
  Backend backend;
  SMLA_RETURN_IF_ERROR(
      detail::resolve_backend("sparse_decode", plan.backend, params.problem.device, &backend));
  RunOptions run_options = options;
  run_options.backend = plan.backend;
  run_options.kernel = plan.kernel;
  const detail::DecodeKernel* kernel = nullptr;
  SMLA_RETURN_IF_ERROR(detail::select_kernel("sparse_decode", plan.backend, params.problem,
                                             plan.kernel, &kernel));
  if (params.problem.b == 0) return {};
  return kernel->run(params, plan, workspace, workspace_bytes, schedule, run_options);
}

std::vector<KernelAvailability> list_prefill_kernels(const SparsePrefillProblem& problem) {
  return detail::list_kernels<detail::PrefillKernel>(Operation::kSparsePrefill, problem);
}

std::vector<KernelAvailability> list_decode_kernels(const SparseDecodeProblem& problem) {
  return detail::list_kernels<detail::DecodeKernel>(Operation::kSparseDecode, problem);
}

}  // namespace sparse_mla
