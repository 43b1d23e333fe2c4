// Running a host back end on a recipe case and checking outputs against the reference with the
// SPEC §5 tolerances (compare.h). Shared by the C++ tests and `sparse-mla check`.
//   PrefillOutputs expected, got;
//   run_reference(c, &expected);
//   run_host(c, {.backend = Backend::kCpu}, &got);
//   CheckReport r = check_prefill(got, expected);   // r.ok, r.message
#pragma once

#include <string>
#include <vector>

#include "verify/compare.h"
#include "verify/recipe.h"

namespace sparse_mla::verify {

struct CheckReport {
  bool ok = true;
  std::vector<CompareResult> results;  // one per output tensor
  std::string message;                 // every tensor's line, joined by newlines
};

// Runs the case through the public API on host outputs (allocated here, NaN-filled, padded
// views when `padded_outputs`). Decode plans, allocates the plan's host workspace and runs.
Status run_host(const PrefillCase& c, const RunOptions& options, PrefillOutputs* out,
                bool padded_outputs = false);
Status run_host(const DecodeCase& c, const RunOptions& options, DecodeOutputs* out,
                bool padded_outputs = false);

// One decode through the planned public API: describe, plan, a workspace of the plan's size on
// `workspace_device`, run with a freshly built schedule (kBuild). What every one-shot caller
// (tests, the CLI's reference check) does.
Status plan_and_run_decode(const SparseDecodeArgs& args, const RunOptions& options,
                           Device workspace_device = Device::cpu());

// run_host with Backend::kReference: the expected outputs.
Status run_reference(const PrefillCase& c, PrefillOutputs* expected);
Status run_reference(const DecodeCase& c, DecodeOutputs* expected);

// Compares every output tensor (read through the views, so padded layouts compare too):
// prefill out / max_logits / lse, decode out / lse, with the SPEC §5 tolerances.
CheckReport check_prefill(const PrefillOutputs& got, const PrefillOutputs& expected);
CheckReport check_decode(const DecodeOutputs& got, const DecodeOutputs& expected);

// The elements of a host bf16 or fp32 view (rank <= 4) in row-major order, as fp32.
std::vector<float> view_to_floats(const TensorView& view);

}  // namespace sparse_mla::verify
