// Compile-time configuration and shared-memory plan of the portable (sm_80+) sparse decode split
// kernel: one CTA = one part of the split-KV schedule x one head group. For each query piece of
// its part it gathers blocks of 64 (or, compact tiles, 32) slots of the main then the extra list,
// dequantises FP8 rows to bf16 in shared memory, and runs an MMA core shared with prefill
// (mma_core.cuh: the wide tiling for 64 rows x 64 keys, the narrow one otherwise).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/portable/common/tile_shape.cuh"
#include "cuda/portable/sparse_decode/launch.h"

namespace sparse_mla::cuda::portable_decode {

// Heads per CTA and warps, by head count: as prefill (see sparse_prefill/config.cuh). 16 and 32
// heads get their own tiles instead of being padded to 64, so their MMA work shrinks with h_q.
template <int kRows>
inline constexpr int kDecodeWarps = kRows == 16 ? 4 : 8;

// The 16-row x 32-key tile: 8 warps on one m16 tile, Q's fragments in registers
// (register_q_core.cuh). kRowGroups and kKeyGroups as TileShape's, where the kernel's
// shared-memory plan reads them.
template <int kDqkValue>
struct RegisterQShape : TileDims<kDqkValue, 16, 8, 32> {
  static constexpr int kRowGroups = 1;  // one 16-row group: barriers after the scores are CTA-wide
  static constexpr int kKeyGroups = 4;  // 8-key groups of a block: slots of the row statistics
};

template <class Shape>
inline constexpr bool kIsRegisterQShape = false;
template <int kDqk>
inline constexpr bool kIsRegisterQShape<RegisterQShape<kDqk>> = true;

// kBlockKeys 64: the standard tile (one CTA per SM on sm_90). 32: the compact tile, half the KV
// shared memory: 2 CTAs per SM with 16 rows on sm_90 (their fixed per-block latencies overlap),
// and the configurations that fit the smaller shared memory of sm_80 / sm_86 / sm_89. 16 rows x
// 32 keys is the register-Q tile; every other tile is the prefill's TileShape.
template <int kDqk, int kRows, int kBlockKeys = 64>
using DecodeShape = std::conditional_t<kRows == 16 && kBlockKeys == 32, RegisterQShape<kDqk>,
                                       TileShape<kDqk, kRows, kDecodeWarps<kRows>, kBlockKeys>>;

// Resident CTAs per SM the register budget is built for (__launch_bounds__): 2 for the register-Q
// tile (<= 128 registers at 256 threads; its shared memory allows 2 on sm_90 for every format and
// on sm_80 for the FP8 formats), else 1.
template <class Shape>
inline constexpr int kDecodeMinCtas = kIsRegisterQShape<Shape> ? 2 : 1;

// Quantized caches: raw token bytes are gathered (cp.async) into `raw` while the previous block
// is being multiplied, then dequantised into the single bf16 tile. bf16 caches: rows go straight
// into a double-buffered tile and `raw` is unused. (The "direct tail" of 9727dd2, the 16-row
// v32_fp8 tile gathering its bf16 RoPE tail straight into the tile to fit 3 CTAs per SM, went with
// the 4-warp 16-row tile: at 2 CTAs per SM the tail, gathered after the scores, landed too late;
// removing it measured 0.96x at 8 / 16 heads, docs/kernels/portable_sparse_decode.md.)
template <class Traits>
struct RawRow {
  static constexpr bool kQuantized = Traits::kQuantDims > 0;
  // the data row, then (split-scale formats) the token's scale row; 16-B rounded for cp.async.
  static constexpr int kBytes =
      Traits::kDataRowBytes + (Traits::kScalesInRow ? 0 : Traits::kScaleRowBytes);
  static constexpr int kPitch = (kBytes + 15) / 16 * 16;
  static constexpr int kScaleBase =
      Traits::kScalesInRow ? Traits::kScaleOffset : Traits::kDataRowBytes;
  static_assert(!kQuantized || Traits::kDataRowBytes % 16 == 0,
                "token data rows are gathered in 16-B chunks");
  static_assert(Traits::kTailOffset % 16 == 0, "the bf16 tail is copied in 16-B chunks");
};

// Whether a tile may run as paired head groups (decode_pair_clusters): quantized caches, tiles
// other than the register-Q tile. The host pairs only 64-row tiles on sm_90; the register-Q tile
// compiles the paired path out (with it in, ptxas spilled 24 B of v4fp8's at the 128-register cap
// on sm_90a).
template <class Shape, class Traits>
inline constexpr bool kCanPairHeadGroups = Traits::kQuantDims > 0 && !kIsRegisterQShape<Shape>;

// Shared memory, in bytes (64 rows, 64 keys): v32_fp8 73,728 Q + 73,728 bf16 KV + 8,192 P +
// 41,984 raw + 2,048 row statistics + 520 row addresses + 128 flags, padded by alignment to
// 200,704 (sizeof); bf16 cache, 576 dims: 73,728 Q + 2 x 73,728 KV + 8,192 P + statistics and
// addresses = 232,448 (sizeof): exactly sm_90's per-block limit, no headroom left.
template <class Shape, class Traits>
struct DecodeSmem {
  static constexpr bool kQuantized = RawRow<Traits>::kQuantized;
  static constexpr int kTileStages = kQuantized ? 1 : 2;
  static constexpr int kRawBytes = kQuantized ? Shape::kBlockKeys * RawRow<Traits>::kPitch : 16;
  static constexpr int kScaleRows = Traits::kScalesInRow ? 1 : Shape::kBlockKeys;

  alignas(1024) uint8_t q[Shape::kQBytes];                     // [kRows, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[kTileStages][Shape::kKvTileBytes];  // [stages][keys, d_qk] bf16
  alignas(1024) uint8_t p[Shape::kPBytes];                     // [kRows, 64] bf16, swizzled
  alignas(16) uint8_t raw[1][kRawBytes];                       // [keys, kPitch] raw token bytes
  float red_max[Shape::kKeyGroups * Shape::kRows];             // [4, kRows]
  float red_sum[Shape::kKeyGroups * Shape::kRows];             // [4, kRows]
  const uint8_t* row_ptr[Shape::kBlockKeys];                   // next block's clamped data rows
  const uint8_t* scale_ptr[kScaleRows];                        // next block's scale rows (v4)
  uint8_t valid[2][Shape::kBlockKeys];                         // [2][keys] slot validity
  // Paired head groups: the mbarrier on which the peer's st.async half of each block's bf16 tile
  // lands (one phase per block). Fits the alignment padding of every configuration.
  alignas(8) uint64_t peer_half_landed;
};

inline constexpr int kMaxSmemSm90 = 232448;  // opt-in shared memory per block, sm_90
static_assert(sizeof(DecodeSmem<DecodeShape<576, 64>, KvTraits<KvCacheFormat::kV32Fp8, 576>>) <=
              kMaxSmemSm90);
static_assert(sizeof(DecodeSmem<DecodeShape<512, 64>, KvTraits<KvCacheFormat::kV4Fp8, 512>>) <=
              kMaxSmemSm90);
static_assert(sizeof(DecodeSmem<DecodeShape<576, 64>, KvTraits<KvCacheFormat::kBf16, 576>>) <=
              kMaxSmemSm90);
// 2 CTAs per sm_90 SM for the register-Q tile of every format.
inline constexpr int kSmemPerSmSm90 = 233472;     // 228 KiB
inline constexpr int kSmemReservedPerCta = 1024;  // the driver's per-CTA reservation
static_assert(
    2 * (sizeof(DecodeSmem<DecodeShape<576, 16, 32>, KvTraits<KvCacheFormat::kBf16, 576>>) +
         kSmemReservedPerCta) <=
    kSmemPerSmSm90);

}  // namespace sparse_mla::cuda::portable_decode
