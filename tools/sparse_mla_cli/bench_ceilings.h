// The ceilings `sparse-mla bench` reports every row against: docs/flashmla_baseline.md's H200
// figures on a GPU, and on the host the best fp32 GEMM rate and copy bandwidth sampled over the
// whole run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench_types.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::cli::bench {

// GPU ceilings: docs/flashmla_baseline.md's H200 numbers, plus this device's copy bandwidth for the
// record.
Ceilings gpu_ceilings(Device device, nlohmann::ordered_json* record);

// CPU ceilings are the best the machine showed during the run. The machine is shared: a single
// measurement taken while others compiled put the back end at 119 % of "the GEMM rate". So the
// GEMM and the copy are sampled before the first case and again after every case, and the best
// sample of each is the ceiling all rows are reported against.
class HostCeilings {
 public:
  explicit HostCeilings(int64_t gemm_n) : gemm_n_(static_cast<int>(gemm_n)) {}

  // `first`: the initial measurement; the samples after each case are short (2 GEMMs and one
  // copy, about 0.1 s) so that they add little to the run.
  // Returns this sample's GEMM rate (0 without CBLAS).
  double sample(bool first);
  Ceilings ceilings() const;
  nlohmann::ordered_json record() const;

 private:
  int gemm_n_;
  double best_flop_ = 0, best_bytes_ = 0;
  int gemm_samples_ = 0, gemm_runs_ = 0, copy_samples_ = 0, copy_runs_ = 0, copy_threads_ = 0;
  std::string library_;
};

}  // namespace sparse_mla::cli::bench
