// Compile-time configuration and shared-memory plan of the portable (sm_80+) sparse prefill
// kernel: one CTA = one query token x kRows heads (a head group), looping over the token's top-k
// slots in 64-row blocks gathered with cp.async into a double buffer.
#pragma once

#include <cstdint>

#include "cuda/portable/common/tile_shape.cuh"

namespace sparse_mla::cuda::portable_prefill {

// Heads per CTA and warps, by head count (the head tile of a problem is chosen on the host by
// prefill_rows_for()):
//   16 rows, 4 warps: h_q <= 16. One m16 tile; 4 warps = the 4 key/column groups.
//   32 rows, 8 warps: h_q <= 32. Two row groups of one m16 tile each.
//   64 rows, 8 warps: h_q > 32 (two CTAs per token for 128 heads, as FlashMLA). Two row groups
//   of two m16 tiles: 32 rows x 128 columns = 128 fp32 O registers per thread, the most that
//   leaves room for scores and fragments under the 255-register limit of 256-thread CTAs.
template <int kRows>
inline constexpr int kPrefillWarps = kRows == 16 ? 4 : 8;

template <int kDqk, int kRows>
using PrefillShape = TileShape<kDqk, kRows, kPrefillWarps<kRows>>;

// Shared memory, in bytes (576 dims, 64 rows): 73,728 Q + 2 x 73,728 KV + 8,192 P + 2,048 row
// statistics + 512 row addresses + 128 validity flags = 232,064 <= 232,448 (sm_90 opt-in).
// Tiles are 1024-B aligned so every 128-B swizzled row starts on a bank-group boundary.
template <class Shape>
struct PrefillSmem {
  alignas(1024) uint8_t q[Shape::kQBytes];           // [kRows, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[2][Shape::kKvTileBytes];  // [2][64, d_qk] bf16, swizzled
  alignas(1024) uint8_t p[Shape::kPBytes];           // [kRows, 64] bf16, swizzled
  float red_max[Shape::kKeyGroups * Shape::kRows];   // [4, kRows] partial row maxima
  float red_sum[Shape::kKeyGroups * Shape::kRows];   // [4, kRows] partial row sums
  const uint8_t* row_ptr[Shape::kBlockKeys];         // next block's clamped row addresses
  uint8_t valid[2][Shape::kBlockKeys];               // [2][64] slot validity per buffer
};

// Opt-in shared memory per block on sm_90 (227 KiB); sm_80 allows 163 KiB, sm_86/89 99 KiB —
// the host checks the device's limit before launching.
inline constexpr int kMaxSmemSm90 = 232448;
static_assert(sizeof(PrefillSmem<PrefillShape<576, 64>>) <= kMaxSmemSm90);
static_assert(sizeof(PrefillSmem<PrefillShape<512, 64>>) <= kMaxSmemSm90);

}  // namespace sparse_mla::cuda::portable_prefill
