// KV-cache codec: quantize bf16 rows into a cache format, dequantize them back, write an engine's
// new tokens at their slots, and read single values (SPEC §4). Host caches run on the CPU, CUDA
// caches as device kernels on options.stream (nothing is staged through the host; CUDA-graph safe).
// The quantizers are the reference rules of SPEC §4:
//   FP8 (v32_fp8, v4_fp8, v41_fp8): per tile s = max(amax/448, 1e-4) rounded up to a power of two,
//     q = e4m3(x / s) with round-to-nearest-even;
//   FP4 (v41_fp4): per 16 values s = e4m3(clamp(amax/6, 2^-9, 448)) (amax/6 an fp32 division, the
//     e4m3 conversion round-to-nearest-even), code = e2m1(x / s) with x / s the fp32 division by
//     s's fp32 value, rounded to nearest even and saturated to +-6 (PTX
//     cvt.rn.satfinite.e2m1x2.f32); a NaN in a tile makes its scale NaN (e4m3 0x7f), NaN codes
//     are stored as 0; value 2i in the low nibble of byte i.
// Padding bytes (scale-row padding, block tails) are written 0 by quantize_kv_cache.
// Dequantization applies any finite fp32 scale exactly, in fp32.
//
//   kv_bf16  [num_blocks, page_block_size, 1, d_qk]  bf16 (any strides, last dim contiguous)
//   cache    KvCacheView, block_stride_bytes >= kv_cache_min_block_stride(...), on kv_bf16's device
#pragma once

#include <cstdint>

#include "sparse_mla/backend.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla {

// Quantizes (or, for bf16, copies) every token of kv_bf16 into `cache` (writable). Padding bytes
// of the layout are written as zero.
Status quantize_kv_cache(const TensorView& kv_bf16, const KvCacheView& cache,
                         const RunOptions& options = {});

// Decodes every token of `cache` into `kv_out` ([num_blocks, page_block_size, 1, d_qk], bf16 or
// fp32). fp32 output is exact: code value * scale in fp32.
Status dequantize_kv_cache(const KvCacheView& cache, const TensorView& kv_out,
                           const RunOptions& options = {});

// The cache writer an engine calls every step after computing the new tokens' latents:
//   rows          [n, d_qk] bf16 (row stride any, last dim contiguous)
//   slot_mapping  [n] int32, physical slot = block * page_block_size + offset; a slot < 0 is
//                 skipped (padding tokens), a slot >= num_slots is an error on the host and skipped
//                 on the device (the kernel cannot report it without a synchronisation)
//   cache         any format and layout; each written token's record (data, scales, scale-row
//                 padding, tail) is the bytes quantize_kv_cache would write for that token;
//                 other tokens' bytes and block tails are not touched
// On the host every slot is checked before anything is written, and a slot mapped by several
// rows gets the last of them (on a device: one of them). All tensors on the cache's device.
// On CUDA one kernel on options.stream, no allocation.
Status write_kv_cache(const TensorView& rows, const TensorView& slot_mapping,
                      const KvCacheView& cache, const RunOptions& options = {});

// Decodes one token (physical slot) of a host cache into `row` (d_qk floats). No bounds checks
// beyond a debug assert: callers validate slots first.
void dequantize_kv_token(const KvCacheView& cache, int64_t slot, float* row);

// Scalar conversions, exposed for tests and tools.
float e4m3_to_float(uint8_t bits);
uint8_t float_to_e4m3(float x);  // round to nearest even, saturating to +-448, NaN -> 0x7f
float ue8m0_to_float(uint8_t bits);
float e2m1_to_float(uint8_t code);  // low 4 bits: sign bit 3, magnitudes {0,.5,1,1.5,2,3,4,6}
uint8_t float_to_e2m1(float x);     // round to nearest even, saturating to +-6, NaN -> 0
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float x);  // round to nearest even

}  // namespace sparse_mla

namespace sparse_mla {

// Writes one token of a host cache from parts an engine's cache writer already has (no rounding
// of scales):
//   e4m3   [quantized_bytes] bytes (e4m3 codes, or v41_fp4's packed e2m1 pairs);
//   scales [num_scales] fp32 (v32_fp8) or one byte each (ue8m0: v4_fp8, v41_fp8; e4m3: v41_fp4);
//   rope   [64] bf16 bits (must be nullptr for the V4.1 records, which have no bf16 tail). For the
//   bf16
//   format pass e4m3 = scales = nullptr and the whole row in `rope` as d_qk bf16 values.
Status pack_kv_token(const KvCacheView& cache, int64_t slot, const uint8_t* e4m3,
                     const void* scales, const uint16_t* rope);

}  // namespace sparse_mla
