// Warpgroup-level controls of the sm90a kernels (cuda-techniques.md §5): register reallocation
// between producer and consumer warpgroups (setmaxnreg), the generic -> async proxy fence that
// makes st.shared data visible to wgmma, and mbarrier arrivals for plain stores and cp.async
// completions (the waits and cluster forms are in cluster.cuh). Compiled for any architecture
// other than sm_90a the register controls are no-ops and the barrier arrivals trap.
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

// Lowers (kDecrease) or raises this warpgroup's per-thread register cap to kRegs; every warp of
// the warpgroup executes the same call.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Makes this thread's earlier generic-proxy shared-memory writes visible to the async proxy
// (wgmma operands); a barrier must follow before the reading wgmma is issued.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// One arrival on the mbarrier at shared::cta address `barrier` (release at CTA scope).
__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// An arrival on `barrier` once every cp.async this thread issued before has completed; .noinc:
// the arrival is one of the barrier's initial count (it does not add an expected arrival).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace sparse_mla::cuda::ptx
