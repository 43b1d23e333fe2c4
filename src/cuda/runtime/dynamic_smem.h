// A kernel's dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize) raised
// once per (kernel, device) instead of on every launch: the attribute belongs to the function in
// the device's context and stays set, so later launches skip the runtime call.
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
