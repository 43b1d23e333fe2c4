// KV-cache formats and their byte layouts (SPEC §4).
//
// The set of formats is open: every format is one row of a traits table (`kv_cache_format_info`)
// that says how a token's bytes are laid out; kernels and codecs read the table instead of
// branching on the known formats; a format in two page layouts is two rows.
//
// v32_fp8, 656 B/token, token rows contiguous:
//   [0, 512)    512 x e4m3 latent, 4 tiles of 128
//   [512, 528)  4 x fp32 scale (multiplier, one per tile; any finite value accepted)
//   [528, 656)  64 x bf16 RoPE
// v4_fp8, 584 B/token, structure of arrays per page block:
//   block + t*576                  448 x e4m3 latent (7 tiles of 64), then 64 x bf16 RoPE
//   block + page_block_size*576 + t*8   7 x ue8m0 scale (2^(byte-127)), 1 padding byte
//   block stride >= ceil(page_block_size*584 / 576) * 576
// bf16, 2*d_qk B/token: plain bf16 rows (d_qk 512 or 576).
// v41_fp8, 528 B/token: 512 x e4m3 (all dims, RoPE included), 16 x ue8m0 (one per 32 values).
// v41_fp4, 288 B/token: 512 x e2m1 (two per byte, even index in the low nibble), 32 x e4m3 scales
//   (one per 16 values, no per-tensor scale).
// The V4.1 records come in two page layouts (KvLayout), which bytes per token cannot tell apart:
//   page_split         data rows t*512 / t*256, then scale rows at pbs*512 + t*16 / pbs*256 + t*32;
//                      block stride >= pbs*528 rounded up to 512 / pbs*288 rounded up to 256
//   token_interleaved  record t at t*528 / t*288, its scales at +512 / +256; stride a multiple of
//                      528 / 288
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla {

enum class KvCacheFormat {
  kV32Fp8,  // DeepSeek V3.2, d_qk 576
  kV4Fp8,   // DeepSeek V4, d_qk 512
  kBf16,    // unquantized, d_qk 512 or 576
  kV41Fp8,  // DeepSeek V4.1 sliding-window (main) cache, d_qk 512
  kV41Fp4,  // DeepSeek V4.1 compressed (extra) cache, d_qk 512
};

enum class ValueEncoding {
  kNone,  // bf16 cache: nothing quantized
  kE4m3,  // one byte per value
  kE2m1,  // two values per byte, the even-indexed value in the low nibble
};

enum class ScaleEncoding {
  kNone,     // bf16 cache
  kFloat32,  // fp32 multiplier
  kUe8m0,    // one byte, 2^(byte-127)
  kE4m3,     // one byte, an e4m3 multiplier
};

// How a page block arranges its tokens' records.
enum class KvLayout {
  kDefault,           // the format's own: page_split for v4_fp8 and V4.1, token_interleaved else
  kPageSplit,         // every token's data row, then every token's scale row; block padded
  kTokenInterleaved,  // each token's record contiguous (data, scales, bf16 tail)
};

// One row of the traits table: one (format, layout) pair. All offsets in bytes.
//   data row  = block + t * data_row_bytes: quantized values, then (v32_fp8, v4_fp8, bf16) the
//               bf16 tail at tail_offset; token_interleaved rows also hold the scales
//   scales    = token_interleaved: data row + scale_offset_in_row
//               page_split:        block + page_block_size * data_row_bytes + t * scale_row_bytes
struct KvCacheFormatInfo {
  KvCacheFormat format;
  KvLayout layout;        // never kDefault
  std::string_view name;  // "v32_fp8", "v4_fp8", "bf16", "v41_fp8", "v41_fp4"
  int d_qk;               // 576, 512; 0 = taken from q (bf16)
  int bytes_per_token;    // 656, 584, 528, 288; 0 = 2*d_qk (bf16)
  ValueEncoding value_encoding;
  int quantized_dims;   // quantized values per token (512, 448, 512, 512; 0 for bf16)
  int quantized_bytes;  // their bytes (512, 448, 512, 256)
  int tile_size;        // values per scale (128, 64, 32, 16)
  int num_scales;       // scales per token (4, 7, 16, 32)
  ScaleEncoding scale_encoding;
  int scale_bytes;          // bytes of one scale (4, 1, 1, 1; 0 for bf16)
  int data_row_bytes;       // token stride of the data rows: 656, 576, 2*d_qk (0), 512 / 528, ...
  int scale_offset_in_row;  // token_interleaved: the scales' offset in the row (512, 512, 256)
  int scale_row_bytes;      // page_split: bytes of one token's scale row (8, 16, 32)
  int tail_offset;          // offset of the bf16 tail (d_qk - quantized_dims values): 528, 448, 0
  int block_alignment;      // block stride must be a multiple of this (576, 512, 256, 528, 288, 1)
};

// The row of (format, layout); kDefault picks the format's own layout. A pair that does not exist
// (v32_fp8 page_split, v4_fp8 token_interleaved, a bad enum value) returns the table's "unknown"
// row, whose format differs from `format` and whose sizes are 0.
const KvCacheFormatInfo& kv_cache_format_info(KvCacheFormat format,
                                              KvLayout layout = KvLayout::kDefault);
std::optional<KvCacheFormat> parse_kv_cache_format(std::string_view name);  // "v32_fp8", ...
const char* kv_cache_format_name(KvCacheFormat format);
// "page_split", "token_interleaved" ("default" for kDefault); parse accepts those names.
std::optional<KvLayout> parse_kv_layout(std::string_view name);
const char* kv_layout_name(KvLayout layout);
// The layout kDefault stands for with `format`; an explicit layout is returned as is.
KvLayout resolve_kv_layout(KvCacheFormat format, KvLayout layout);
// True when (format, layout) is a row of the table.
bool kv_cache_layout_supported(KvCacheFormat format, KvLayout layout);
// Which extra-cache formats go with a main cache format (SPEC §3): the main cache's own, and with
// a v41_fp8 main cache also v41_fp4; the rule in words for messages.
bool kv_cache_extra_format_allowed(KvCacheFormat main, KvCacheFormat extra);
const char* kv_cache_extra_format_rule(KvCacheFormat main);

// Bytes per token as FlashMLA's `[num_blocks, page_block_size, 1, bytes_per_token]` view
// counts them (656, 584, 2*d_qk).
int kv_cache_bytes_per_token(KvCacheFormat format, int d_qk);
// The smallest legal block stride in bytes for a page block of `page_block_size` tokens
// (0 for a (format, layout) pair that does not exist).
int64_t kv_cache_min_block_stride(KvCacheFormat format, int64_t page_block_size, int d_qk,
                                  KvLayout layout = KvLayout::kDefault);

// A paged KV cache: `num_blocks` page blocks of `page_block_size` tokens, `block_stride_bytes`
// apart (>= kv_cache_min_block_stride, a multiple of the format's block alignment).
// A token's physical slot is block * page_block_size + offset.
struct KvCacheView {
  const void* data = nullptr;
  KvCacheFormat format = KvCacheFormat::kV32Fp8;
  int64_t num_blocks = 0;
  int64_t page_block_size = 0;
  int64_t block_stride_bytes = 0;
  int d_qk = 0;  // 576 (v32_fp8), 512 (v4_fp8, V4.1), 512 or 576 (bf16)
  Device device{};
  KvLayout layout = KvLayout::kDefault;  // page_split or token_interleaved (V4.1 records)

  int64_t num_slots() const { return num_blocks * page_block_size; }
};

}  // namespace sparse_mla
