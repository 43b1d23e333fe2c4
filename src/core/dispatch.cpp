// The public entry points: validate, pick the back end and the kernel variant, run.
// Kernel choice walks the back end's table (kernel_variant.h) and takes the first variant that
// supports the problem, or the variant named in RunOptions::kernel.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>

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
    case Backend::kReference:
      return reference_prefill_kernels();
    case Backend::kCpu:
      return cpu_prefill_kernels();
    case Backend::kCuda:
      return cuda_prefill_kernels();
    case Backend::kAuto:
      break;
  }
  return {};
}

template <>
std::span<const DecodeKernel> table_for<DecodeKernel>(Backend backend) {
  switch (backend) {
    case Backend::kReference:
      return reference_decode_kernels();
    case Backend::kCpu:
      return cpu_decode_kernels();
    case Backend::kCuda:
      return cuda_decode_kernels();
    case Backend::kAuto:
      break;
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

// The planned kernel, found by name: its `supports` accepted the problem when the plan was made,
// and the plan's fingerprint says neither the problem nor the kernel changed since.
const DecodeKernel* planned_kernel(const DecodePlan& plan) {
  for (const DecodeKernel& k : table_for<DecodeKernel>(plan.backend)) {
    if (plan.kernel == k.name) return &k;
  }
  return nullptr;
}

// A 64-bit hash of the plan's fields (FNV-1a over 64-bit words, then a final mix), salted with an
// address of this process: a plan is valid in the process (and library build) that made it.
class Fingerprint {
 public:
  Fingerprint() { add(reinterpret_cast<uintptr_t>(&kSalt)); }
  void add(uint64_t v) { hash_ = (hash_ ^ v) * 0x100000001b3ull; }
  void add(const std::string& text) {
    add(text.size());
    uint64_t word = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      word = word << 8 | static_cast<unsigned char>(text[i]);
      if (i % 8 == 7) add(std::exchange(word, 0));
    }
    add(word);
  }
  uint64_t value() const {
    uint64_t h = hash_;  // murmur3's finaliser: every input bit reaches every output bit
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdull;
    h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h == 0 ? 1 : h;  // 0 = "never planned"
  }

 private:
  static constexpr char kSalt = 0;
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

// Every field of the plan but `reason` (free text for logs). A field added to DecodePlan is added
// here, so that an edit to it is caught.
uint64_t plan_fingerprint(const DecodePlan& plan) {
  const SparseDecodeProblem& p = plan.problem;
  Fingerprint f;
  for (int64_t v : {p.b, p.s_q, p.h_q, p.d_qk, p.d_v, p.topk, p.page_block_size, p.extra_topk,
                    p.extra_page_block_size}) {
    f.add(static_cast<uint64_t>(v));
  }
  f.add(static_cast<uint64_t>(p.format));
  f.add(static_cast<uint64_t>(p.kv_layout));
  f.add(p.extra_format ? 1 + static_cast<uint64_t>(*p.extra_format) : 0);
  f.add(static_cast<uint64_t>(p.extra_kv_layout));
  f.add((p.has_topk_length ? 1u : 0u) | (p.topk_length_per_token ? 2u : 0u) |
        (p.has_attn_sink ? 4u : 0u) | (p.has_extra ? 8u : 0u) |
        (p.has_extra_topk_length ? 16u : 0u) | (p.extra_topk_length_per_token ? 32u : 0u));
  f.add(static_cast<uint64_t>(p.device.type));
  f.add(static_cast<uint64_t>(p.device.index));
  f.add(static_cast<uint64_t>(plan.backend));
  f.add(plan.kernel);
  f.add(static_cast<uint64_t>(plan.num_sm_parts));
  f.add(static_cast<uint64_t>(plan.workspace_bytes));
  f.add(plan.kernel_config);
  f.add(plan.kernel_family);
  for (int64_t v :
       {static_cast<int64_t>(plan.rows_per_cta), static_cast<int64_t>(plan.keys_per_block),
        static_cast<int64_t>(plan.head_groups), plan.min_units_per_part}) {
    f.add(static_cast<uint64_t>(v));
  }
  f.add((plan.warp_specialized ? 1u : 0u) | (plan.paired_head_groups ? 2u : 0u) |
        (plan.index_union ? 4u : 0u));
  return f.value();
}

Status check_problem(const SparsePrefillProblem& p) {
  return validate_prefill_problem("sparse_prefill", p);
}
Status check_problem(const SparseDecodeProblem& p) { return validate_decode_problem(p); }
SparsePrefillProblem normalized(const SparsePrefillProblem& p) { return p; }
SparseDecodeProblem normalized(const SparseDecodeProblem& p) {
  return normalized_decode_problem(p);
}

template <typename Kernel, typename Problem>
std::vector<KernelAvailability> list_kernels(Operation op, const Problem& given) {
  std::vector<KernelAvailability> result;
  const Status valid = check_problem(given);
  const Problem problem = normalized(given);
  for (Backend backend : {Backend::kCuda, Backend::kCpu, Backend::kReference}) {
    for (const Kernel& k : table_for<Kernel>(backend)) {
      KernelAvailability a{k.name, backend, op, false, ""};
      std::string why_not;
      if (!valid.ok()) {
        a.why_not = "invalid problem: " + valid.message();
      } else if (backend == Backend::kCuda && !cuda_available()) {
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
  if (a.kv_layout != b.kv_layout) return "kv_layout";
  if (a.extra_format != b.extra_format) return "extra_format";
  if (a.has_extra && (a.extra_kv_layout != b.extra_kv_layout)) return "extra_kv_layout";
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
  if (!(a.device == b.device))
    return "device " + to_string(a.device) + " vs " + to_string(b.device);
  return "";
}

}  // namespace
}  // namespace detail

Status sparse_prefill(const SparsePrefillArgs& args, const RunOptions& options) {
  SMLA_RETURN_IF_ERROR(detail::validate_run_options("sparse_prefill", options));
  detail::PrefillParams params;
  SMLA_RETURN_IF_ERROR(detail::validate_prefill(args, &params));
  SMLA_RETURN_IF_ERROR(detail::validate_no_aliasing(args));
  Backend backend;
  SMLA_RETURN_IF_ERROR(
      detail::resolve_backend("sparse_prefill", options.backend, params.problem.device, &backend));
  const detail::PrefillKernel* kernel = nullptr;
  SMLA_RETURN_IF_ERROR(
      detail::select_kernel("sparse_prefill", backend, params.problem, options.kernel, &kernel));
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

Status plan_sparse_decode(const SparseDecodeProblem& given, DecodePlan* plan,
                          const RunOptions& options) {
  if (plan == nullptr) return invalid_argument("plan_sparse_decode: plan is null");
  SMLA_RETURN_IF_ERROR(detail::validate_run_options("plan_sparse_decode", options));
  SMLA_RETURN_IF_ERROR(detail::validate_decode_problem(given));
  const SparseDecodeProblem problem = detail::normalized_decode_problem(given);
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
  result.fingerprint = detail::plan_fingerprint(result);
  *plan = std::move(result);
  return {};
}

Status sparse_decode(const SparseDecodeArgs& args, const DecodePlan& plan, void* workspace,
                     size_t workspace_bytes, DecodeSchedule schedule, const RunOptions& options) {
  SMLA_RETURN_IF_ERROR(detail::validate_run_options("sparse_decode", options));
  detail::DecodeParams params;
  SMLA_RETURN_IF_ERROR(detail::validate_decode(args, &params));
  SMLA_RETURN_IF_ERROR(detail::validate_no_aliasing(args));
  if (!(params.problem == plan.problem)) {
    return invalid_argument("sparse_decode: the arguments do not match the plan: " +
                            detail::first_difference(plan.problem, params.problem));
  }
  // A plan is plain data: one edited after planning (or never planned) would steer a kernel to
  // a split count or workspace it was not made for.
  if (plan.fingerprint != detail::plan_fingerprint(plan)) {
    return invalid_argument(
        "sparse_decode: the plan was not made by plan_sparse_decode in this process, or its "
        "fields were changed after planning (backend " +
        std::string(backend_name(plan.backend)) + ", kernel \"" + plan.kernel +
        "\", num_sm_parts " + std::to_string(plan.num_sm_parts) + ", workspace_bytes " +
        std::to_string(plan.workspace_bytes) + "): plan again");
  }
  if (schedule != DecodeSchedule::kBuild && schedule != DecodeSchedule::kReuse) {
    return invalid_argument(
        "sparse_decode: schedule = " + std::to_string(static_cast<int>(schedule)) +
        " is not kBuild or kReuse");
  }
  if (workspace_bytes < plan.workspace_bytes) {
    return invalid_argument(
        "sparse_decode: workspace_bytes = " + std::to_string(workspace_bytes) +
        " is smaller than plan.workspace_bytes = " + std::to_string(plan.workspace_bytes));
  }
  if (plan.workspace_bytes > 0 && workspace == nullptr) {
    return invalid_argument("sparse_decode: workspace is null but the plan needs " +
                            std::to_string(plan.workspace_bytes) + " bytes");
  }
  if (plan.workspace_bytes > 0 &&
      reinterpret_cast<uintptr_t>(workspace) % kDecodeWorkspaceAlignment != 0) {
    char address[32];
    std::snprintf(address, sizeof(address), "%p", workspace);
    return invalid_argument("sparse_decode: workspace = " + std::string(address) +
                            " is not aligned to " + std::to_string(kDecodeWorkspaceAlignment) +
                            " bytes (kDecodeWorkspaceAlignment)");
  }
  // The tensors may have moved device since planning only if the problem (which holds the
  // device) changed, which the check above refuses; the back end is checked again all the same.
  Backend backend;
  SMLA_RETURN_IF_ERROR(
      detail::resolve_backend("sparse_decode", plan.backend, params.problem.device, &backend));
  const detail::DecodeKernel* kernel = detail::planned_kernel(plan);
  if (kernel == nullptr) {
    return {StatusCode::kInternal, "sparse_decode: the planned kernel \"" + plan.kernel +
                                       "\" is not in the tables of back end " +
                                       backend_name(plan.backend)};
  }
  if (params.problem.b == 0) return {};
  // The back end runs what the plan names (plan.backend, plan.kernel); options carries the
  // stream and the thread count.
  return kernel->run(params, plan, workspace, workspace_bytes, schedule, options);
}

Status validate_problem(const SparsePrefillProblem& problem) {
  return detail::check_problem(problem);
}

Status validate_problem(const SparseDecodeProblem& problem) {
  return detail::check_problem(problem);
}

std::vector<KernelAvailability> list_prefill_kernels(const SparsePrefillProblem& problem) {
  return detail::list_kernels<detail::PrefillKernel>(Operation::kSparsePrefill, problem);
}

std::vector<KernelAvailability> list_decode_kernels(const SparseDecodeProblem& problem) {
  return detail::list_kernels<detail::DecodeKernel>(Operation::kSparseDecode, problem);
}

}  // namespace sparse_mla
