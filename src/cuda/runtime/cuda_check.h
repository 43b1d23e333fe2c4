// Turning CUDA runtime errors into the library's Status (kDeviceError), for host code of the CUDA
// back ends: SMLA_CUDA_RETURN_IF_ERROR around runtime calls, check_last_launch after a launch.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "sparse_mla/status.h"

namespace sparse_mla::cuda {

// "cudaMalloc(&ptr, bytes) failed: out of memory (cudaErrorMemoryAllocation)".
inline Status cuda_error_status(const char* what, cudaError_t error) {
  return {StatusCode::kDeviceError, std::string(what) + " failed: " + cudaGetErrorString(error) +
                                        " (" + cudaGetErrorName(error) + ")"};
}

// Reports (and clears) an error of the launch just made, e.g. a bad configuration.
inline Status check_last_launch(const char* kernel) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return {};
  return cuda_error_status((std::string("launch of ") + kernel).c_str(), error);
}

}  // namespace sparse_mla::cuda

// Returns a kDeviceError Status naming the call when a CUDA runtime call fails.
#define SMLA_CUDA_RETURN_IF_ERROR(call)                                      \
  do {                                                                       \
    cudaError_t smla_cuda_error_ = (call);                                   \
    if (smla_cuda_error_ != cudaSuccess) {                                   \
      return ::sparse_mla::cuda::cuda_error_status(#call, smla_cuda_error_); \
    }                                                                        \
  } while (0)
