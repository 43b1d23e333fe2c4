// The kernel tables of the two host back ends (core/kernel_variant.h): the reference
// ("reference_sparse_*", double, one thread) and the threaded CPU back end ("cpu_sparse_*").
// Each table has one variant that runs every valid problem whose tensors are in host memory.
#include <new>
#include <span>
#include <string>

#include "core/kernel_variant.h"
#include "cpu/cpu_backend.h"
#include "cpu/reference.h"

namespace sparse_mla::detail {
namespace {

bool on_host(const Device& device, const char* backend, std::string* why_not) {
  if (!device.is_cuda()) return true;
  if (why_not != nullptr) {
    *why_not = std::string("the ") + backend + " back end needs host tensors, these are on " +
               to_string(device);
  }
  return false;
}

bool reference_supports_prefill(const SparsePrefillProblem& problem, std::string* why_not) {
  return on_host(problem.device, "reference", why_not);
}
bool cpu_supports_prefill(const SparsePrefillProblem& problem, std::string* why_not) {
  return on_host(problem.device, "cpu", why_not);
}
bool reference_supports_decode(const SparseDecodeProblem& problem, std::string* why_not) {
  return on_host(problem.device, "reference", why_not);
}
bool cpu_supports_decode(const SparseDecodeProblem& problem, std::string* why_not) {
  return on_host(problem.device, "cpu", why_not);
}

// The reference allocates per query (gathered rows, scores); keep std::bad_alloc off the API.
template <typename Fn>
Status no_throw(const char* op, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return {StatusCode::kDeviceError, std::string(op) + ": out of host memory in the reference"};
  }
}

Status reference_run_prefill(const PrefillParams& params, const RunOptions&) {
  return no_throw("sparse_prefill", [&] { return cpu::reference_sparse_prefill(params); });
}
Status cpu_run_prefill(const PrefillParams& params, const RunOptions& options) {
  return cpu::cpu_sparse_prefill(params, options);
}

Status reference_plan_decode(const SparseDecodeProblem&, const RunOptions&, DecodePlan* plan) {
  plan->num_sm_parts = 0;
  plan->workspace_bytes = 0;
  plan->reason = "reference: one thread, queries in order, double accumulation; no workspace";
  return {};
}
Status cpu_plan_decode(const SparseDecodeProblem& problem, const RunOptions& options,
                       DecodePlan* plan) {
  const int64_t queries = problem.b * problem.s_q;
  const cpu::WorkSplit split = cpu::split_work(queries, problem.h_q, options.num_threads);
  plan->num_sm_parts = split.workers;
  plan->workspace_bytes = 0;
  plan->reason = "cpu: " + std::to_string(queries) + " queries x " +
                 std::to_string(split.head_groups) + " head group(s) of up to " +
                 std::to_string(split.heads_per_group) + " heads on " +
                 std::to_string(split.workers) +
                 " thread(s); each task keeps its own softmax state, so no workspace";
  return {};
}

Status reference_run_decode(const DecodeParams& params, const DecodePlan&, void*, size_t,
                            DecodeSchedule, const RunOptions&) {
  return no_throw("sparse_decode", [&] { return cpu::reference_sparse_decode(params); });
}
Status cpu_run_decode(const DecodeParams& params, const DecodePlan&, void*, size_t, DecodeSchedule,
                      const RunOptions& options) {
  return cpu::cpu_sparse_decode(params, options);
}

constexpr PrefillKernel kReferencePrefill[] = {
    {"reference_sparse_prefill", Backend::kReference, reference_supports_prefill,
     reference_run_prefill},
};
constexpr PrefillKernel kCpuPrefill[] = {
    {"cpu_sparse_prefill", Backend::kCpu, cpu_supports_prefill, cpu_run_prefill},
};
constexpr DecodeKernel kReferenceDecode[] = {
    {"reference_sparse_decode", Backend::kReference, reference_supports_decode,
     reference_plan_decode, reference_run_decode},
};
constexpr DecodeKernel kCpuDecode[] = {
    {"cpu_sparse_decode", Backend::kCpu, cpu_supports_decode, cpu_plan_decode, cpu_run_decode},
};

}  // namespace

std::span<const PrefillKernel> reference_prefill_kernels() { return kReferencePrefill; }
std::span<const DecodeKernel> reference_decode_kernels() { return kReferenceDecode; }
std::span<const PrefillKernel> cpu_prefill_kernels() { return kCpuPrefill; }
std::span<const DecodeKernel> cpu_decode_kernels() { return kCpuDecode; }

}  // namespace sparse_mla::detail
