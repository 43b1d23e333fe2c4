// Ceilings of `sparse-mla bench` (bench_ceilings.h).
#include "bench_ceilings.h"

#include <optional>

namespace sparse_mla::cli::bench {

namespace {

using Json = nlohmann::ordered_json;

// H200 ceilings measured for docs/flashmla_baseline.md: dense bf16 GEMM (8192^3, torch) and
// device-to-device copy (bytes read + written).
constexpr double kH200FlopPerS = 791e12;
constexpr double kH200BytesPerS = 4.25e12;

}  // namespace

Ceilings gpu_ceilings(Device device, Json* record) {
  Ceilings c;
  c.flop_per_s = kH200FlopPerS;
  c.bytes_per_s = kH200BytesPerS;
  c.flop_source = "H200 dense bf16 GEMM, docs/flashmla_baseline.md";
  c.bytes_source = "H200 device-to-device copy, docs/flashmla_baseline.md";
  (*record)["flop_per_s"] = c.flop_per_s;
  (*record)["flop_source"] = c.flop_source;
  (*record)["bytes_per_s"] = c.bytes_per_s;
  (*record)["bytes_source"] = c.bytes_source;
  std::optional<CopyBandwidth> copy =
      measure_device_copy(device, kDeviceCopyBytes, kDeviceCopyRepeats);
  (*record)["measured_device_copy_bytes_per_s"] = copy ? Json(copy->bytes_per_s) : Json();
  return c;
}

double HostCeilings::sample(bool first) {
  const int gemm_repeats = first ? kGemmRepeats : 2;
  const int copy_repeats = first ? kHostCopyRepeats : 1;
  double rate = 0;
  if (std::optional<GemmCeiling> g = measure_fp32_gemm(gemm_n_, gemm_repeats)) {
    rate = g->flop_per_s;
    if (rate > best_flop_) best_flop_ = rate;
    library_ = g->library;
    ++gemm_samples_;
    gemm_runs_ += gemm_repeats;
  }
  CopyBandwidth copy = measure_host_copy(kHostCopyBytes, copy_repeats);
  if (copy.bytes_per_s > best_bytes_) best_bytes_ = copy.bytes_per_s;
  copy_threads_ = copy.threads;
  ++copy_samples_;
  copy_runs_ += copy_repeats;
  return rate;
}

Ceilings HostCeilings::ceilings() const {
  Ceilings c;
  c.flop_per_s = best_flop_;
  c.bytes_per_s = best_bytes_;
  c.flop_source = gemm_samples_ == 0
                      ? "not measured: built without CBLAS"
                      : "fp32 sgemm " + std::to_string(gemm_n_) + "^3, best of " +
                            std::to_string(gemm_runs_) + " runs over the bench (" + library_ + ")";
  c.bytes_source = "host memcpy " + std::to_string(kHostCopyBytes >> 20) + " MiB, " +
                   std::to_string(copy_threads_) + " threads, best of " +
                   std::to_string(copy_runs_) + " runs over the bench";
  return c;
}

Json HostCeilings::record() const {
  Ceilings c = ceilings();
  return {{"flop_per_s", gemm_samples_ > 0 ? Json(c.flop_per_s) : Json()},
          {"flop_source", c.flop_source},
          {"bytes_per_s", c.bytes_per_s},
          {"bytes_source", c.bytes_source}};
}

}  // namespace sparse_mla::cli::bench
