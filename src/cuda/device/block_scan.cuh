// CTA-wide exclusive prefix sum over one value per thread (the decode planner's cost line and
// partial slots, the index union's compaction): warp shuffles, then the warps' totals scanned by
// warp 0 through shared scratch.
#pragma once

namespace sparse_mla::cuda {

// Exclusive prefix sum of `value` over the kThreads threads of the CTA (kThreads a multiple of
// 32, at most 1024); *total receives the sum of all values. `warp_sums` is shared scratch of
// kThreads / 32 entries. Every thread must call it; it ends with a barrier, so the scratch may be
// reused at once.
template <int kThreads, typename T>
__device__ T block_exclusive_scan(T value, T* total, T* warp_sums) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kWarps <= 32);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T inclusive = value;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    T up = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T sum = lane < kWarps ? warp_sums[lane] : T(0);
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      T up = __shfl_up_sync(0xffffffffu, sum, d);
      if (lane >= d) sum += up;
    }
    if (lane < kWarps) warp_sums[lane] = sum;
  }
  __syncthreads();
  T result = (warp == 0 ? T(0) : warp_sums[warp - 1]) + inclusive - value;
  *total = warp_sums[kWarps - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return result;
}

}  // namespace sparse_mla::cuda
