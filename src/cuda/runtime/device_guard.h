// Makes one CUDA device current for a scope and restores the caller's device afterwards, so that
// library calls on device N never change which device the caller's own code runs on.
#pragma once

#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.h"

namespace sparse_mla::cuda {

class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != current_) cudaSetDevice(previous_);
  }

  Status enter(int device) {
    SMLA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    current_ = previous_;
    if (device != previous_) SMLA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    current_ = device;
    return {};
  }

 private:
  int previous_ = -1;
  int current_ = -1;
};

}  // namespace sparse_mla::cuda
