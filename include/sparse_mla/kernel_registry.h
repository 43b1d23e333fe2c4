// What kernel variants exist, and whether each can run a given problem (for `sparse-mla list`,
// logs and tests).
#pragma once

#include <string>
#include <vector>

#include "sparse_mla/backend.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"

namespace sparse_mla {

enum class Operation { kSparsePrefill, kSparseDecode };

struct KernelAvailability {
  std::string name;        // e.g. "cpu_sparse_prefill", "portable_sparse_decode_v4fp8"
  Backend backend;
  Operation operation;
  bool usable = false;
  std::string why_not;     // empty when usable
};

std::vector<KernelAvailability> list_prefill_kernels(const SparsePrefillProblem& problem);
std::vector<KernelAvailability> list_decode_kernels(const SparseDecodeProblem& problem);

}  // namespace sparse_mla
