// The machine's ceilings, measured in the run that reports against them: the fp32 GEMM rate
// (OpenBLAS cblas_sgemm, all cores) that the CPU back end's GFLOP/s is a percentage of
// (docs/flashmla_baseline.md goal: >= 30 %), the host copy bandwidth (bytes read + written) that
// its bytes floor uses, and a GPU's device-to-device copy bandwidth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "sparse_mla/tensor_view.h"

namespace sparse_mla::cli {

// Measurement sizes used by `bench` and `info`: a 1024^3 sgemm (2.1 GFLOP, long enough for
// OpenBLAS to reach its steady rate), best of 5; 256 MiB host copies (far beyond any CPU cache),
// best of 3; 1 GiB device copies (beyond any GPU's L2), best of 10.
inline constexpr int kGemmN = 1024;
inline constexpr int kGemmRepeats = 5;
inline constexpr size_t kHostCopyBytes = size_t{256} << 20;
inline constexpr int kHostCopyRepeats = 3;
inline constexpr size_t kDeviceCopyBytes = size_t{1} << 30;
inline constexpr int kDeviceCopyRepeats = 10;

struct GemmCeiling {
  double flop_per_s = 0;  // best of `repeats`
  int n = 0;              // square problem n x n x n
  int repeats = 0;
  std::string library;  // "OpenBLAS 0.3.21 ... (2 threads)"
};

// OpenBLAS picks its kernels for the CPU when it loads. Debian's 0.3.21 does not recognise newer
// CPUs under KVM (this project's Sapphire Rapids VM) and falls back to its SSE3 "Prescott"
// kernels: 23 GFLOP/s instead of 75-150 GFLOP/s with its AVX-512 kernels on the 2-core machine
// (measured; the machine is shared, hence the range). A ceiling that low would flatter the CPU
// back end. When OPENBLAS_CORETYPE is unset and the detected core lacks the ISA the CPU has, this
// sets it (SkylakeX for AVX-512, Haswell for AVX2) and re-executes the program once; call it
// first thing in main. Does nothing without OpenBLAS.
void select_openblas_core(char** argv);

// nullopt when the build has no CBLAS (SMLA_HAVE_CBLAS unset).
std::optional<GemmCeiling> measure_fp32_gemm(int n, int repeats);

struct CopyBandwidth {
  double bytes_per_s = 0;  // (read + written) / time, best of `repeats`
  size_t buffer_bytes = 0;
  int threads = 0;
  int repeats = 0;
};

// memcpy of `buffer_bytes`, split over all hardware threads.
CopyBandwidth measure_host_copy(size_t buffer_bytes, int repeats);

// Device-to-device copy of `buffer_bytes` on a CUDA device, timed with events (runtime.h
// time_runs); docs/flashmla_baseline.md's 4.25 TB/s is this number on an H200. nullopt when it
// fails.
std::optional<CopyBandwidth> measure_device_copy(Device device, size_t buffer_bytes, int repeats);

}  // namespace sparse_mla::cli
