// Device side of the FP8 dequantisation checks (fp8_dequant_kernels.h): one thread per
// (pair, scale byte), 2^24 in all, compares dequant_e4m3x2 with dequant_e4m3x2_pow2 bit for bit
// (a NaN half must meet a NaN half; payloads may differ). Compiled for every SMLA_CUDA_ARCHS entry:
// the pow2 form traps below sm_90 (ptx::mul_bf16x2), so older code only reports its arch.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "cuda/device/fp8_dequant.cuh"
#include "gpu/fp8_dequant_kernels.h"

namespace sparse_mla::test_support {
namespace {

constexpr uint32_t kPairs = 1u << 16;
constexpr uint32_t kScaleBytes = 256;
constexpr uint32_t kUnitScaleByte = 127;  // ue8m0 2^0
constexpr int kThreads = 256;

// DeviceResult::status, set by thread 0 of the launch (zeroed before it: 0 means it never ran).
constexpr uint32_t kRanPow2 = 1;
constexpr uint32_t kNoSm90Code = 2;

struct DeviceResult {
  uint32_t status;
  uint32_t mismatches;
  E4m3x2DequantMismatch recorded[kMaxRecordedDequantMismatches];
};

__device__ __forceinline__ bool same_half(uint32_t a, uint32_t b) {
  return a == b || (bf16_is_nan(a) && bf16_is_nan(b));
}

// result: one DeviceResult, zeroed. unit_scale: [kPairs] bf16x2.
__global__ void compare_e4m3x2_dequant_forms_kernel(DeviceResult* result, uint32_t* unit_scale) {
  const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t pair = idx & (kPairs - 1), scale_byte = idx >> 16;
  uint32_t status = kRanPow2, pow2_path = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  pow2_path = cuda::dequant_e4m3x2_pow2(pair, cuda::ue8m0_to_bf16x2(scale_byte));
#else
  status = kNoSm90Code;
#endif
  if (idx == 0) result->status = status;
  if (status != kRanPow2) return;
  const uint32_t fp32_path = cuda::dequant_e4m3x2(pair, cuda::ue8m0_to_float(scale_byte));
  if (scale_byte == kUnitScaleByte) unit_scale[pair] = fp32_path;
  if (!same_half(fp32_path & 0xffffu, pow2_path & 0xffffu) ||
      !same_half(fp32_path >> 16, pow2_path >> 16)) {
    const uint32_t slot = atomicAdd(&result->mismatches, 1u);
    if (slot < kMaxRecordedDequantMismatches) {
      result->recorded[slot] = {pair, scale_byte, fp32_path, pow2_path};
    }
  }
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

}  // namespace

cudaError_t compare_e4m3x2_dequant_forms(E4m3x2DequantComparison* out) {
  *out = {};
  void* raw_result = nullptr;
  void* raw_unit_scale = nullptr;
  cudaError_t err = cudaMalloc(&raw_result, sizeof(DeviceResult));
  const std::unique_ptr<void, CudaFree> result_owner(raw_result);
  if (err != cudaSuccess) return err;
  err = cudaMalloc(&raw_unit_scale, kPairs * sizeof(uint32_t));
  const std::unique_ptr<void, CudaFree> unit_scale_owner(raw_unit_scale);
  if (err != cudaSuccess) return err;
  auto* result = static_cast<DeviceResult*>(raw_result);
  auto* unit_scale = static_cast<uint32_t*>(raw_unit_scale);
  if ((err = cudaMemset(result, 0, sizeof(DeviceResult))) != cudaSuccess) return err;
  if ((err = cudaMemset(unit_scale, 0, kPairs * sizeof(uint32_t))) != cudaSuccess) return err;

  compare_e4m3x2_dequant_forms_kernel<<<kPairs * kScaleBytes / kThreads, kThreads>>>(result,
                                                                                     unit_scale);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  DeviceResult host{};
  if ((err = cudaMemcpy(&host, result, sizeof(host), cudaMemcpyDeviceToHost)) != cudaSuccess) {
    return err;
  }
  // A status other than the two codes (0: never written) means that the kernel did not run.
  if (host.status != kRanPow2 && host.status != kNoSm90Code) return cudaErrorLaunchFailure;
  out->pow2_compiled = host.status == kRanPow2;
  out->mismatches = host.mismatches;
  const uint32_t kept = host.mismatches < kMaxRecordedDequantMismatches
                            ? host.mismatches
                            : static_cast<uint32_t>(kMaxRecordedDequantMismatches);
  out->recorded.assign(host.recorded, host.recorded + kept);
  out->unit_scale.resize(kPairs);
  return cudaMemcpy(out->unit_scale.data(), unit_scale, kPairs * sizeof(uint32_t),
                    cudaMemcpyDeviceToHost);
}

}  // namespace sparse_mla::test_support
