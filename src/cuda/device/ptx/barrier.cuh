// Named CTA barriers (bar.sync id, count): lets the warps that share a group of query rows
// synchronise without stopping the rest of the CTA. Id 0 is __syncthreads; kernels use 1..15.
#pragma once

namespace sparse_mla::cuda::ptx {

// count: number of participating threads, a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// The same barrier for threads that reach it from different instructions (e.g. the two warps of
// a pair on the two sides of a warp-uniform branch): barrier.sync without .aligned. bar.sync is
// barrier.sync.aligned, which PTX defines only when all threads of the CTA execute the same
// barrier instruction (compute-sanitizer synccheck: "divergent thread(s) in block"). Each warp
// must still arrive whole. PTX gives the non-aligned form these semantics from sm_70 on; this
// library targets sm_80+.
__device__ __forceinline__ void named_barrier_sync_unaligned(int id, int count) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Arrives at named barrier `id` without waiting (bar.arrive): the producer side of a
// producer-consumer hand-off, whose consumers wait with named_barrier_sync(id, count) on the same
// count (the arriving and the waiting threads together). Shared-memory writes made before the
// arrival are visible to the waiting threads after their bar.sync (PTX memory model: a
// bar.arrive synchronizes with the bar.sync on the same barrier; FlashMLA's warp groups hand off
// this way, cuda-techniques.md §5).
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace sparse_mla::cuda::ptx
