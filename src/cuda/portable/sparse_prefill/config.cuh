// Compile-time configuration and shared-memory plan of the portable (sm_80+) sparse prefill
// kernel: one CTA = one query token x kRows heads (a head group), looping over the token's top-k
// slots in 64-row blocks gathered with cp.async into a double buffer.
#pragma once

#include <cstdint>

#include "cuda/portable/common/tile_shape.cuh"

namespace sparse_mla::cuda::portable_prefill {

// Heads per CTA and warps, by head count (the head tile of a problem is chosen on the host by
// prefill_rows_for()); 16 and 32 rows run the MMA core shared with decode (common/):
//   16 rows, 4 warps: h_q <= 16. One m16 tile; 4 warps = the 4 key/column groups.
//   32 rows, 8 warps: h_q <= 32. Two row groups of one m16 tile each.
//   64 rows, 8 warps: h_q > 32 (two CTAs per token for 128 heads, as FlashMLA): WideShape below.
template <int kRows>
inline constexpr int kPrefillWarps = kRows == 16 ? 4 : 8;

// kBlockKeys 64: the standard tiles (16 / 32 rows here, 64 rows = WideShape below). 32: the
// compact tiles (16, 32 and 64 rows on the shared core, half the KV double buffer) for devices
// whose shared memory does not hold the standard ones (sm_80: 163 KiB, sm_86/89: 99 KiB).
template <int kDqk, int kRows, int kBlockKeys = 64>
using PrefillShape = TileShape<kDqk, kRows, kPrefillWarps<kRows>, kBlockKeys>;

// Shared memory, in bytes (576 dims, 32 rows): 36,864 Q + 2 x 73,728 KV + 4,096 P + 1,024 row
// statistics + 512 row addresses + 128 validity flags, rounded up to 1 KiB = 190,464.
// Tiles are 1024-B aligned so every 128-B swizzled row starts on a bank-group boundary.
template <class Shape>
struct PrefillSmem {
  alignas(1024) uint8_t q[Shape::kQBytes];           // [kRows, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[2][Shape::kKvTileBytes];  // [2][keys, d_qk] bf16, swizzled
  alignas(1024) uint8_t p[Shape::kPBytes];           // [kRows, 64] bf16, swizzled
  float red_max[Shape::kKeyGroups * Shape::kRows];   // [4, kRows] partial row maxima
  float red_sum[Shape::kKeyGroups * Shape::kRows];   // [4, kRows] partial row sums
  const uint8_t* row_ptr[Shape::kBlockKeys];         // next block's clamped row addresses
  uint8_t valid[2][Shape::kBlockKeys];               // [2][keys] slot validity per buffer
};

// The 64-row CTA (h_q > 32) uses its own tiling (common/wide_tile_attention.cuh), built to cut
// shared-memory reads, which bound the kernel (docs/kernels/portable_sparse_prefill.md):
//   QK^T split over d_qk: warp (g, rh, kh) scores rows [32 rh, +32) x keys [32 kh, +32) of the
//        block over k-steps 2, 3 (g = 1) or 0, 1 (g = 0) of every 64-dim panel, i.e. half of
//        d_qk; 32x32 warp tiles read 256 B of fragments per MMA (32x16 tiles: 384 B). The two
//        partial sums of a tile meet in shared memory (2 KB per warp pair, fp32), after which
//        warp (g, rh, kh) owns rows [32 rh + 16 g, +16) x keys [32 kh, +32).
//   P.V: warp w owns all 64 rows x output columns [64 w, +64) (128 fp32 registers); V fragments
//        then feed 4 m16 tiles (160 B of fragments per MMA -> 128 B).
template <int kDqkValue>
struct WideShape : TileDims<kDqkValue, 64, 8, 64> {
  static constexpr int kColsPerWarp = 512 / 8;  // 64 output columns = 8 n8 tiles
};

// Shared memory of the 64-row CTA (576 dims): 73,728 Q + 2 x 73,728 KV + 8,192 P (first used as
// the split-K exchange: 4 warp pairs x 2 KB) + 1,024 row statistics + 128 validity flags =
// 230,528, rounded up to 1 KiB = 231,424 B <= 232,448.
template <class Shape>
struct WideSmem {
  alignas(1024) uint8_t q[Shape::kQBytes];           // [64, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[2][Shape::kKvTileBytes];  // [2][keys, d_qk] bf16, swizzled
  alignas(1024) uint8_t p[Shape::kPBytes];           // [64, 64] bf16 P, swizzled
  float red[2][Shape::kRows];           // per key half: partial row max, at the end partial row sum
  float alpha[Shape::kRows];            // this block's O rescale per row
  float out_scale[Shape::kRows];        // 1 / (l + sink term) per row, 0 for empty rows
  uint8_t valid[2][Shape::kBlockKeys];  // [buffer][key] slot validity
};

// Opt-in shared memory per block on sm_90 (227 KiB); sm_80 allows 163 KiB, sm_86/89 99 KiB —
// the host checks the device's limit before launching.
inline constexpr int kMaxSmemSm90 = 232448;
static_assert(sizeof(WideSmem<WideShape<576>>) <= kMaxSmemSm90);
static_assert(sizeof(PrefillSmem<PrefillShape<576, 32>>) <= kMaxSmemSm90);

}  // namespace sparse_mla::cuda::portable_prefill
