// KV-cache formats and their byte layouts (SPEC §4).
//
// The set of formats is open: every format is one row of a traits table (`kv_cache_format_info`)
// that says how a token's bytes are laid out; kernels and codecs read the table instead of
// branching on two known formats. Adding DeepSeek V4.1's fp8/fp4 caches means adding rows.
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
};

enum class ScaleEncoding {
  kNone,     // bf16 cache
  kFloat32,  // fp32 multiplier
  kUe8m0,    // one byte, 2^(byte-127)
};

enum class PageLayout {
  kTokenRows,      // every token's bytes contiguous: data, scales, rope
  kBlockSplit576,  // v4: data+rope rows of 576 B, then 8-B scale rows, block padded to 576 B
};

// One row of the traits table. All offsets in bytes.
struct KvCacheFormatInfo {
  KvCacheFormat format;
  std::string_view name;  // "v32_fp8", "v4_fp8", "bf16"
  int d_qk;               // 576, 512; 0 = taken from q (bf16)
  int bytes_per_token;    // 656, 584; 0 = 2*d_qk (bf16)
  int quantized_dims;     // e4m3 values per token (512, 448; 0 for bf16)
  int tile_size;          // values per scale (128, 64)
  int num_scales;         // scales per token (4, 7)
  ScaleEncoding scale_encoding;
  PageLayout page_layout;
  int data_row_bytes;       // bytes of one token's data(+rope) row: 656, 576, 2*d_qk
  int scale_offset_in_row;  // kTokenRows: offset of the scales inside the row (512)
  int scale_row_bytes;      // kBlockSplit576: bytes of one token's scale row (8)
  int rope_offset;          // offset of the 64 bf16 RoPE values inside the data row (528, 448)
  int block_alignment;      // block stride must be a multiple of this (576 for v4; 1 otherwise)
};

const KvCacheFormatInfo& kv_cache_format_info(KvCacheFormat format);
std::optional<KvCacheFormat> parse_kv_cache_format(std::string_view name);  // "v32_fp8", ...
const char* kv_cache_format_name(KvCacheFormat format);

// Bytes per token as FlashMLA's `[num_blocks, page_block_size, 1, bytes_per_token]` view
// counts them (656, 584, 2*d_qk).
int kv_cache_bytes_per_token(KvCacheFormat format, int d_qk);
// The smallest legal block stride in bytes for a page block of `page_block_size` tokens.
int64_t kv_cache_min_block_stride(KvCacheFormat format, int64_t page_block_size, int d_qk);

// A paged KV cache: `num_blocks` page blocks of `page_block_size` tokens, `block_stride_bytes`
// apart (>= kv_cache_min_block_stride, a multiple of the format's block alignment).
// A token's physical slot is block * page_block_size + offset.
struct KvCacheView {
  const void* data = nullptr;
  KvCacheFormat format = KvCacheFormat::kV32Fp8;
  int64_t num_blocks = 0;
  int64_t page_block_size = 0;
  int64_t block_stride_bytes = 0;
  int d_qk = 0;  // 576 (v32_fp8), 512 (v4_fp8), 512 or 576 (bf16)
  Device device{};

  int64_t num_slots() const { return num_blocks * page_block_size; }
};

}  // namespace sparse_mla
