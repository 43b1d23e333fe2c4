// A grid barrier crossed once per launch by a grid whose CTAs are all resident at once (launched
// cooperatively: cudaLaunchAttributeCooperative, which refuses a grid that cannot be), over two
// words of global memory that start at zero arrivals:
//   words[0]  arrivals: each CTA adds 1 (acq_rel); the last one resets it to 0 for the next launch
//   words[1]  generation: the last arrival releases it (+1); the others wait for it to move
// Every thread's global writes before the barrier are visible to every thread of the grid after
// it (thread 0's acq_rel arrival or acquire wait, ordered for its CTA by the barriers around it).
// The next launch on the same words starts at zero arrivals whatever the generation is, so the
// words need zeroing only once (the decode planner does it with the schedule).
#pragma once

#include <cstdint>

namespace sparse_mla::cuda {

__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t add_acq_rel_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

__device__ __forceinline__ void store_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_release_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Every thread of every CTA of the grid calls it once, after its last write that another CTA
// reads after the barrier.
__device__ __forceinline__ void grid_barrier_once(uint32_t* words, uint32_t num_ctas) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* arrivals = words;
    uint32_t* generation = words + 1;
    // Read before arriving (acquire keeps the arrival after it): the generation cannot move
    // until this CTA has arrived.
    const uint32_t seen = load_acquire_gpu(generation);
    if (add_acq_rel_gpu(arrivals, 1) == num_ctas - 1) {
      store_relaxed_gpu(arrivals, 0);
      store_release_gpu(generation, seen + 1);
    } else {
      while (load_acquire_gpu(generation) == seen) {
      }
    }
  }
  __syncthreads();
}

}  // namespace sparse_mla::cuda
