// The call that a decode over index unions runs (docs/kernels/index_union.md), on the host: where
// the unions go in the Hopper decode's workspace, and the union's call made from the caller's.
// Host-only and free of the CUDA runtime, so the CPU test suite tests it
// (tests/cpp/index_union_test.cpp); kernel_tables.cpp sequences the launches.
#pragma once

#include <cstdint>

#include "core/params.h"
#include "planning/decode_workspace.h"
#include "planning/index_union.h"
#include "sparse_mla/sparse_decode.h"

namespace sparse_mla::cuda {

// The workspace of the Hopper decode's plan: the split decode's regions for the launched call
// (`launched`: the problem itself, or its union's call, index_union_problem), then, over index
// unions, the unions' region.
struct Sm90aDecodeWorkspace {
  planning::DecodeWorkspaceLayout decode;
  planning::IndexUnionLayout index_union;  // empty unless over_union
  int64_t total_bytes = 0;
};

Sm90aDecodeWorkspace sm90a_decode_workspace(const SparseDecodeProblem& problem,
                                            const SparseDecodeProblem& launched, int num_parts,
                                            bool over_union);

// The union's call of `params`: `launched` as its problem, the unions in `workspace` (laid out
// by `layout`) as its lists with their lengths as per-request topk_length; q, out, lse and the
// sink stay the call's, with their strides (the kernels map union row r back to head r % h_q of
// token r / h_q).
detail::DecodeParams index_union_params(const detail::DecodeParams& params,
                                        const SparseDecodeProblem& launched,
                                        const planning::IndexUnionLayout& layout, void* workspace);

}  // namespace sparse_mla::cuda
