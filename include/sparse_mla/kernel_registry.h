// What kernel variants exist, and whether each can run a given problem (for `sparse-mla list`,
// logs and tests).
#pragma once

#include <string>
#include <vector>

#include "sparse_mla/backend.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"
#include "sparse_mla/status.h"

namespace sparse_mla {

enum class Operation { kSparsePrefill, kSparseDecode };

struct KernelAvailability {
  std::string name;  // e.g. "cpu_sparse_prefill", "portable_sparse_decode_v4fp8"
  Backend backend;
  Operation operation;
  bool usable = false;
  std::string why_not;  // empty when usable
};

// Whether a problem is one a call could pose (sizes in range, a known format, consistent extra
// cache fields): the checks sparse_prefill and plan_sparse_decode make on shapes, with the same
// messages. For a problem that fails them, the listings below mark every kernel unusable and
// give this message as the reason.
Status validate_problem(const SparsePrefillProblem& problem);
Status validate_problem(const SparseDecodeProblem& problem);

std::vector<KernelAvailability> list_prefill_kernels(const SparsePrefillProblem& problem);
std::vector<KernelAvailability> list_decode_kernels(const SparseDecodeProblem& problem);

}  // namespace sparse_mla
