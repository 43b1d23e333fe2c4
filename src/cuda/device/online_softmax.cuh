// Online-softmax building blocks shared by the portable kernels (cuda-techniques.md §8): scores
// are kept in the log2 domain (score * sm_scale * log2(e)), the running max starts at -inf and a
// row that has seen no valid key yet uses 0 in its place, so exp2 never sees inf - inf.
// Row statistics of an mma.sync C fragment live on the 4 lanes of a quad.
#pragma once

#include <cmath>

namespace sparse_mla::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// 2^x, ~2 ulp; exp2(-inf) = 0. Subnormal results flush to 0, which only drops weights < 2^-126.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The max to subtract: 0 while no valid key has been seen (m = -inf).
__device__ __forceinline__ float usable_max(float m) { return m == -INFINITY ? 0.0f : m; }

// One block's step of a row's running max m (log2 domain): m becomes max(m, block_max); the
// block's scores subtract m_use, and alpha = 2^(m_old - m_use) rescales the row's old sum and
// output (0 while no valid key had been seen).
struct RunningMaxStep {
  float m_use, alpha;
};

__device__ __forceinline__ RunningMaxStep advance_running_max(float& m, float block_max) {
  const float m_old = m;
  m = fmaxf(m_old, block_max);
  const float m_use = usable_max(m);
  return {m_use, fast_exp2(m_old - m_use)};
}

// advance_running_max with lazy rescaling: m moves only when the block's max exceeds it by more
// than kLazyRescaleLog2, so after a row's first blocks alpha is almost always exactly 1 and the
// output's rescale is skipped. Weights 2^(s - m) then reach 2^8 = 256, far inside the range of
// bf16 P and fp32 sums; the sums, the output scale and lse use this m consistently, and the row's
// true max (max_logits) is kept apart. m = -inf moves on the first valid block (-inf + 8 = -inf);
// a NaN block max leaves it (as fmaxf skips NaN).
inline constexpr float kLazyRescaleLog2 = 8.0f;

__device__ __forceinline__ RunningMaxStep advance_running_max_lazy(float& m, float block_max) {
  const float m_old = m;
  if (block_max > m_old + kLazyRescaleLog2) m = block_max;
  const float m_use = usable_max(m);
  return {m_use, fast_exp2(m_old - m_use)};
}

// Output scale of a finished row with running max m (log2 domain) and sum l > 0, with an
// optional attention sink (natural-log logit; -inf = none, +inf = output 0): 1 / (l + 2^(s*log2e -
// m)).
__device__ __forceinline__ float output_scale(float m, float l, const float* sink) {
  float denominator = l;
  if (sink != nullptr) denominator += exp2f(*sink * kLog2e - m);
  return 1.0f / denominator;
}

}  // namespace sparse_mla::cuda
