// Host side of the FP8 dequantisation device checks (fp8_dequant_kernels.cu): the two e4m3x2 ->
// bf16x2 forms of cuda/device/fp8_dequant.cuh, dequant_e4m3x2 (fp32 scale) and
// dequant_e4m3x2_pow2 (ue8m0 scale as bf16x2), run on the device for every pair of codes and
// every scale byte. Compiled only into CUDA builds of sparse_mla_gpu_tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace sparse_mla::test_support {

// Whether a bf16 bit pattern (low 16 bits) is a NaN: the rule both sides of the check use.
SMLA_HOST_DEVICE inline bool bf16_is_nan(uint32_t half) { return (half & 0x7fffu) > 0x7f80u; }

// Mismatches kept beyond the count: enough to see a pattern in a failure message.
inline constexpr int kMaxRecordedDequantMismatches = 16;

struct E4m3x2DequantMismatch {
  uint32_t pair;        // two e4m3 codes, first in the low byte
  uint32_t scale_byte;  // ue8m0
  uint32_t fp32_path;   // dequant_e4m3x2(pair, ue8m0_to_float(scale_byte)), bf16x2
  uint32_t pow2_path;   // dequant_e4m3x2_pow2(pair, ue8m0_to_bf16x2(scale_byte)), bf16x2
};

struct E4m3x2DequantComparison {
  // False when the kernel ran code built without sm_90 (the pow2 form needs mul.rn.bf16x2); then
  // nothing was compared.
  bool pow2_compiled = false;
  uint32_t mismatches = 0;  // of the 65536 x 256 (pair, scale byte) results
  // The first min(mismatches, kMaxRecordedDequantMismatches) reported (atomic order, not sorted).
  std::vector<E4m3x2DequantMismatch> recorded;
  // [65536] bf16x2: the fp32 form at scale byte 127 (1.0) by pair, for anchors on known values
  // (two forms that both returned 0 would agree too).
  std::vector<uint32_t> unit_scale;
};

// Runs both forms on all 2^24 (pair, scale byte) inputs on the current device. The device must be
// sm_90 (9.x) and the build must carry sm_90 code for the comparison to run; without sm_90 code
// the kernel only reports so (pow2_compiled false). Returns the first CUDA error, if any.
cudaError_t compare_e4m3x2_dequant_forms(E4m3x2DequantComparison* out);

}  // namespace sparse_mla::test_support
