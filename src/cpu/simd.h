// Portable fp32 SIMD for the CPU back end's micro-kernels, on GCC/Clang vector extensions: one
// `VecF` is the widest register the build targets (16 lanes with AVX-512, 8 with AVX, 4 else),
// so the same source is an AVX-512 kernel under -march=native and plain SSE in sanitizer builds.
// Explicit vectors (rather than auto-vectorised loops) keep register-blocked accumulators in
// registers, which GCC's vectoriser does not do for 2-D accumulator tiles.
#pragma once

#include <cstdint>
#include <cstring>

namespace sparse_mla::cpu::simd {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif

typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline VecF load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof v);  // one unaligned vector load
  return v;
}
inline void store(float* p, VecF v) { std::memcpy(p, &v, sizeof v); }
inline VecF splat(float x) { return VecF{} + x; }

inline float reduce_max(VecF v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
inline float reduce_sum(VecF v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// 2^x for x <= 0 (softmax probabilities; x may be -inf). Relative error about 2e-7 (degree-6
// polynomial on [-0.5, 0.5] after rounding x to the nearest integer); results below 2^-126 are
// flushed to exactly 0, so masked scores (-inf) give 0.
inline VecF exp2_nonpositive(VecF x) {
  const VecF clamped = x < -126.0f ? splat(-126.0f) : x;
  // Round to nearest integer: adding 1.5 * 2^23 pushes the fraction out of the mantissa.
  const VecF n = (clamped + 12582912.0f) - 12582912.0f;
  const VecF f = clamped - n;  // [-0.5, 0.5]
  // Taylor coefficients (ln 2)^k / k! of 2^f = exp(f ln 2) up to f^6: truncation error
  // (0.347^7 / 7!) < 1.2e-7 on [-0.5, 0.5].
  VecF p = splat(1.5403530393381606e-4f);
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  // Scale by 2^n: add n to the exponent field.
  VecI bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += __builtin_convertvector(n, VecI) << 23;
  VecF result;
  std::memcpy(&result, &bits, sizeof result);
  return x < -126.0f ? splat(0.0f) : result;
}

// Transposes a kLanes x kLanes block in registers: afterwards rows[c][i] = old rows[i][c].
// log2(kLanes) butterfly stages; stage B swaps bit B between row and column index, moving
// element (r, c) with r & B != c & B to (r ^ B, c ^ B). One two-source permute per row per stage
// (vpermt2ps with AVX-512).
template <int B>
inline void transpose_stage(VecF* rows) {
  VecI lo, hi;  // lanes 0..kLanes-1 pick from the first source, kLanes.. from the second
  for (int c = 0; c < kLanes; ++c) {
    lo[c] = (c & B) ? kLanes + c - B : c;
    hi[c] = (c & B) ? kLanes + c : c + B;
  }
  for (int r = 0; r < kLanes; ++r) {
    if (r & B) continue;
    const VecF a = rows[r], b = rows[r + B];
#if defined(__clang__)
    for (int c = 0; c < kLanes; ++c) {
      rows[r][c] = lo[c] < kLanes ? a[lo[c]] : b[lo[c] - kLanes];
      rows[r + B][c] = hi[c] < kLanes ? a[hi[c]] : b[hi[c] - kLanes];
    }
#else
    rows[r] = __builtin_shuffle(a, b, lo);
    rows[r + B] = __builtin_shuffle(a, b, hi);
#endif
  }
}

inline void transpose(VecF* rows) {
  if constexpr (kLanes >= 16) transpose_stage<8>(rows);
  if constexpr (kLanes >= 8) transpose_stage<4>(rows);
  transpose_stage<2>(rows);
  transpose_stage<1>(rows);
}

}  // namespace sparse_mla::cpu::simd
