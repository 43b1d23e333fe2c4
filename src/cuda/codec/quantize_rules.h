// The reference quantizer's scalar rules (SPEC §4, kv_cache_codec.h) for the device codec, written
// once for host and device (SMLA_HOST_DEVICE) so that the CPU test suite checks them bit for bit
// against the host codec's (cpu/fp8.h) on every bf16 input, without a GPU:
//   FP8 tile (v32_fp8, v4_fp8, v41_fp8): s = max(amax / 448, 1e-4) rounded up to a power of two
//     (NaN amax: NaN; +inf: +inf), q = e4m3(x / s) round-to-nearest-even, saturating, NaN -> 0x7f;
//     the scale stored as fp32 (v32_fp8) or ue8m0 (ceil log2, NaN / +inf -> 0xff);
//   FP4 tile (v41_fp4): scale byte e4m3(clamp(amax / 6, 2^-9, 448)), 0x7f for a tile holding NaN;
//     code = e2m1(x / scale) as PTX cvt.rn.satfinite.e2m1x2.f32 rounds (to nearest, ties to the
//     even code, |x| > 5 saturating to 6), NaN -> 0, sign kept.
// Every division is IEEE fp32 (nvcc's default -prec-div=true; no fast-math in this build) and
// subnormals are kept (-ftz=false), as on the host.
// sm_100's cvt.rn.satfinite.e2m1x2.f32 rounds as float_to_e2m1 below; it is not used: this build
// targets sm_80 / sm_90, and the software rule is the one the tests check.
#pragma once

#include <cmath>
#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#include "core/e2m1.h"
#include "core/host_device.h"
#include "core/ue8m0.h"

namespace sparse_mla::cuda::codec {

SMLA_HOST_DEVICE inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

SMLA_HOST_DEVICE inline float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}

SMLA_HOST_DEVICE inline bool is_nan(float x) { return (float_bits(x) & 0x7fffffffu) > 0x7f800000u; }

SMLA_HOST_DEVICE inline float bf16_bits_to_float(uint32_t bits) { return bits_float(bits << 16); }

// Round to nearest even; NaN stays a quiet NaN of the same sign (the host codec's rule).
SMLA_HOST_DEVICE inline uint16_t float_to_bf16_bits(float x) {
  const uint32_t bits = float_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// e4m3fn value of a code (exact; 0x7f / 0xff -> NaN).
SMLA_HOST_DEVICE inline float e4m3_value(uint32_t code) {
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return bits_float(0x7fc00000u);
  // Normal: fp32 exponent field exponent + 120, mantissa on top; subnormal: mantissa * 2^-9.
  const float magnitude = exponent == 0u ? static_cast<float>(mantissa) * 0x1p-9f
                                         : bits_float(((exponent + 120u) << 23) | (mantissa << 20));
  return (code & 0x80u) ? -magnitude : magnitude;
}

// Round to nearest even; |x| >= 448 (and +-inf) saturates to +-448; NaN -> 0x7f.
SMLA_HOST_DEVICE inline uint8_t float_to_e4m3(float x) {
  const uint32_t bits = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return 0x7f;
  const float abs_x = bits_float(abs_bits);
  if (abs_x >= 448.0f) return sign | 0x7e;
  if (abs_x < 0x1p-6f) {
    // Subnormal: multiples of 2^-9 (x * 512 exact; rint rounds half to even); 8 is code 0x08.
    return sign | static_cast<uint8_t>(rintf(abs_x * 512.0f));
  }
  const uint32_t lowest_kept = (abs_bits >> 20) & 1u;
  const uint32_t rounded = abs_bits - (120u << 23) + 0x7ffffu + lowest_kept;
  return sign | static_cast<uint8_t>(rounded >> 20);
}

// e2m1 value and code (core/e2m1.h: the one rule of host and device): nearest, ties to the even
// code, saturating to +-6, NaN -> 0, sign kept.
SMLA_HOST_DEVICE inline float e2m1_value(uint32_t code) {
  return bits_float(::sparse_mla::detail::e2m1_fp32_bits(code));
}
SMLA_HOST_DEVICE inline uint8_t float_to_e2m1(float x) {
  return ::sparse_mla::detail::e2m1_code_of_fp32_bits(float_bits(x));
}

// FP8 tile scale: max(amax / 448, 1e-4) rounded up to a power of two; NaN -> NaN, +inf -> +inf.
SMLA_HOST_DEVICE inline float fp8_tile_scale(float amax) {
  if (is_nan(amax)) return bits_float(0x7fc00000u);
  const float raw = fmaxf(amax / 448.0f, 1e-4f);
  if (float_bits(raw) == 0x7f800000u) return raw;
  int exponent = 0;
  const float mantissa = frexpf(raw, &exponent);
  return ldexpf(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

// ue8m0 code of the smallest power of two >= s (s > 0): NaN / +inf -> 0xff, s <= 2^-127 -> 0.
SMLA_HOST_DEVICE inline uint8_t ue8m0_ceil(float s) {
  if (!(s <= 3.40282347e38f)) return 0xff;
  if (s <= 0x1p-127f) return 0;
  int exponent = 0;
  const float mantissa = frexpf(s, &exponent);
  const int log2_ceil = mantissa == 0.5f ? exponent - 1 : exponent;
  return log2_ceil + 127 >= 0xff ? 0xff : static_cast<uint8_t>(log2_ceil + 127);
}

// FP4 tile scale byte: e4m3(clamp(amax / 6, 2^-9, 448)); 0x7f (NaN) for a tile holding NaN.
SMLA_HOST_DEVICE inline uint8_t fp4_tile_scale_byte(float amax, bool has_nan) {
  if (has_nan || is_nan(amax)) return 0x7f;
  const float raw = amax / 6.0f;
  return float_to_e4m3(raw < 0x1p-9f ? 0x1p-9f : raw > 448.0f ? 448.0f : raw);
}

// ue8m0 byte -> fp32 (core/ue8m0.h).
SMLA_HOST_DEVICE inline float ue8m0_value(uint32_t byte) {
  return bits_float(::sparse_mla::detail::ue8m0_fp32_bits(byte));
}

}  // namespace sparse_mla::cuda::codec
