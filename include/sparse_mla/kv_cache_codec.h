// Host-side KV-cache codec: quantize bf16 rows into a cache format, dequantize them back, and
// read single values (SPEC §4). This is the reference quantizer of FlashMLA's tests:
// per tile s = max(amax/448, 1e-4) rounded up to a power of two, q = e4m3(x / s) with
// round-to-nearest-even. Dequantization applies any finite fp32 scale exactly, in fp32.
//
//   kv_bf16  [num_blocks, page_block_size, 1, d_qk]  bf16 (any strides, last dim contiguous)
//   cache    KvCacheView in host memory, block_stride_bytes >= kv_cache_min_block_stride(...)
#pragma once

#include <cstdint>

#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla {

// Quantizes (or, for bf16, copies) every token of kv_bf16 into `cache` (host memory, writable).
// Padding bytes of the layout are written as zero.
Status quantize_kv_cache(const TensorView& kv_bf16, const KvCacheView& cache);

// Decodes every token of `cache` into `kv_out` ([num_blocks, page_block_size, 1, d_qk], bf16 or
// fp32). fp32 output is exact: e4m3 * scale in fp32.
Status dequantize_kv_cache(const KvCacheView& cache, const TensorView& kv_out);

// Decodes one token (physical slot) into `row` (d_qk floats). No bounds checks beyond a debug
// assert: callers validate slots first.
void dequantize_kv_token(const KvCacheView& cache, int64_t slot, float* row);

// Scalar conversions, exposed for tests and tools.
float e4m3_to_float(uint8_t bits);
uint8_t float_to_e4m3(float x);  // round to nearest even, saturating to +-448, NaN -> 0x7f
float ue8m0_to_float(uint8_t bits);
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float x);  // round to nearest even

}  // namespace sparse_mla

namespace sparse_mla {

// Writes one token from parts an engine's cache writer already has (no rounding of scales):
//   e4m3   [quantized_dims] bytes; scales [num_scales] fp32 (v32_fp8) or ue8m0 bytes (v4_fp8);
//   rope   [64] bf16 bits. For the bf16 format pass e4m3 = scales = nullptr and the whole
//   row in `rope` as d_qk bf16 values.
Status pack_kv_token(const KvCacheView& cache, int64_t slot, const uint8_t* e4m3,
                     const void* scales, const uint16_t* rope);

}  // namespace sparse_mla
