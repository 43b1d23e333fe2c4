// The interface every kernel variant implements, and the tables back ends register them in.
// Dispatch walks these tables in order and takes the first variant whose `supports` accepts the
// problem, so each table lists its best variant first.
#pragma once

#include <span>
#include <string>

#include "core/params.h"
#include "sparse_mla/backend.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"

namespace sparse_mla::detail {

struct PrefillKernel {
  const char* name;
  Backend backend;
  // Returns true if the variant can run `problem`; otherwise writes the reason to *why_not.
  bool (*supports)(const SparsePrefillProblem& problem, std::string* why_not);
  Status (*run)(const PrefillParams& params, const RunOptions& options);
};

struct DecodeKernel {
  const char* name;
  Backend backend;
  bool (*supports)(const SparseDecodeProblem& problem, std::string* why_not);
  // Fills plan->num_sm_parts, workspace_bytes and reason (backend and kernel are set by core).
  Status (*plan)(const SparseDecodeProblem& problem, const RunOptions& options, DecodePlan* plan);
  Status (*run)(const DecodeParams& params, const DecodePlan& plan, void* workspace,
                size_t workspace_bytes, DecodeSchedule schedule, const RunOptions& options);
};

// Tables, one per back end. The CUDA ones are empty in a build without CUDA.
std::span<const PrefillKernel> reference_prefill_kernels();
std::span<const DecodeKernel> reference_decode_kernels();
std::span<const PrefillKernel> cpu_prefill_kernels();
std::span<const DecodeKernel> cpu_decode_kernels();
std::span<const PrefillKernel> cuda_prefill_kernels();
std::span<const DecodeKernel> cuda_decode_kernels();

}  // namespace sparse_mla::detail
