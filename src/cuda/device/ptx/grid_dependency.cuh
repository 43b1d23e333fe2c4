// Programmatic dependent launch (sm_90+): the kernel that is launched as a programmatic
// dependent of this one (cudaLaunchAttributeProgrammaticStreamSerialization) may start once
// every CTA of this grid has signalled or exited; it waits for this grid's results with
// griddepcontrol.wait (cudaGridDependencySynchronize), which returns once the whole grid has
// completed and its memory operations are visible. Signalling early only moves the dependent's
// launch, never that wait.
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

// The number of SMs of the device (%nsmid: one more than the highest SM id).
__device__ __forceinline__ uint32_t sm_count() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%nsmid;\n" : "=r"(n));
  return n;
}

// This CTA lets the programmatic dependent launch (griddepcontrol.launch_dependents).
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace sparse_mla::cuda::ptx
