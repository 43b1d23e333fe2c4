// Per-(kernel, device) facts that launchers need on every launch, set or asked once instead: a
// kernel's dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize: the
// attribute belongs to the function in the device's context and stays set) and the PTX version
// of the code it runs (cudaFuncAttributes::ptxVersion: fixed once the module is loaded).
#pragma once

#include <cuda_runtime.h>

namespace sparse_mla::cuda {

// Makes `kernel` launchable with `bytes` of dynamic shared memory on the current device: sets the
// attribute unless an earlier call already set at least `bytes` there. Thread-safe; a failed call
// is not remembered (the next one tries again). A cudaDeviceReset drops the attribute but not this
// record: the next launch over 48 KiB would then fail, and report it, at launch.
cudaError_t ensure_max_dynamic_smem(const void* kernel, int bytes);

template <class Kernel>
cudaError_t ensure_max_dynamic_smem(Kernel* kernel, int bytes) {
  return ensure_max_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

// The PTX version (e.g. 90) that `kernel` was compiled to for the current device, asked once per
// (kernel, device). Thread-safe; a failed query is returned and not remembered.
cudaError_t kernel_ptx_version(const void* kernel, int* version);

template <class Kernel>
cudaError_t kernel_ptx_version(Kernel* kernel, int* version) {
  return kernel_ptx_version(reinterpret_cast<const void*>(kernel), version);
}

// CTAs of `kernel` resident per SM on the current device at `threads` threads and `bytes` of
// dynamic shared memory (the limit raised first), or 0 if either query fails (the error is
// cleared; callers report "cannot be resident").
template <class Kernel>
int resident_ctas_per_sm(Kernel* kernel, int threads, int bytes) {
  int ctas = 0;
  if (ensure_max_dynamic_smem(kernel, bytes) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, threads, bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ctas;
}

}  // namespace sparse_mla::cuda
