// One test-recipe case made ready to run on a back end: inputs uploaded when the back end is
// CUDA, outputs allocated (NaN-filled) beside them, and for decode the plan made and the
// workspace allocated once. run() is exactly one call of the public API — what `bench` times and
// `check` calls once — and fetch() copies the outputs to host memory for verification.
#pragma once

#include <string>

#include "sparse_mla/sparse_mla.h"
#include "verify/recipe.h"

namespace sparse_mla::cli {

// The `--backend` values of the commands, and auto resolved: CUDA when a device is visible, else
// the CPU back end.
inline constexpr const char* kBackendChoices[] = {"auto", "cpu", "cuda", "reference"};
Backend resolve_backend(Backend requested);
// Where a (resolved) back end's tensors live: CUDA device 0 for kCuda, else the host.
Device device_for(Backend backend);
// A `--kernel` value: "" or the name of a prefill or decode kernel of `backend` (resolved).
Status check_kernel_flag(const std::string& kernel, Backend backend);

class PrefillRunner {
 public:
  // `c` must outlive the runner (host runs point into it).
  Status prepare(const verify::PrefillCase& c, Device device, const RunOptions& options);
  Status run() const { return sparse_prefill(args_, options_); }
  Status fetch(verify::PrefillOutputs* host) const;
  // The kernel variant dispatch picks for this problem (first usable one of the back end).
  const std::string& kernel() const { return kernel_; }

 private:
  verify::DevicePrefillInputs device_inputs_;
  Buffer out_, max_logits_, lse_;
  SparsePrefillArgs args_;
  SparsePrefillProblem problem_;
  RunOptions options_;
  std::string kernel_;
};

class DecodeRunner {
 public:
  Status prepare(const verify::DecodeCase& c, Device device, const RunOptions& options);
  // kBuild: schedule build + attention + combine, a decode step's first layer end to end.
  // kReuse: attention + combine over the schedule a kBuild run left in the workspace, as every
  // later layer of the step runs (and as the FlashMLA anchors were timed).
  Status run(DecodeSchedule schedule = DecodeSchedule::kBuild) const {
    return sparse_decode(args_, plan_, workspace_.data(), workspace_.bytes(), schedule, options_);
  }
  Status fetch(verify::DecodeOutputs* host) const;
  const std::string& kernel() const { return plan_.kernel; }
  const DecodePlan& plan() const { return plan_; }

 private:
  verify::DeviceDecodeInputs device_inputs_;
  Buffer out_, lse_, workspace_;
  SparseDecodeArgs args_;
  DecodePlan plan_;
  RunOptions options_;
};

}  // namespace sparse_mla::cli
