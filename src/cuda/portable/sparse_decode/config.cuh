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
// (register_q_core.cuh). Members as TileShape's where the kernel's load, dequantisation and
// shared-memory plan read them.
template <int kDqkValue>
struct RegisterQShape {
  static constexpr int kDqk = kDqkValue;
  static constexpr int kDv = 512;
  static constexpr int kRows = 16;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockKeys = 32;
  static constexpr int kRowGroups = 1;  // one 16-row group: barriers after the scores are CTA-wide
  static constexpr int kKeyGroups = 4;  // 8-key groups of a block: slots of the row statistics
  static constexpr int kChunksPerRow = kDqk / 8;
  static constexpr int kPanels = kDqk / 64;
  static constexpr int kQBytes = kRows * kDqk * 2;
  static constexpr int kKvTileBytes = kBlockKeys * kDqk * 2;
  static constexpr int kPBytes = kRows * 64 * 2;
  static_assert(kDqk == 576 || kDqk == 512, "d_qk must be 576 or 512");
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
using DecodeShape =
    std::conditional_t<kRows == 16 && kBlockKeys == 32, RegisterQShape<kDqk>,
                       TileShape<kDqk, kRows, kDecodeWarps<kRows>, kBlockKeys>>;

// Resident CTAs per SM the register budget is built for (__launch_bounds__): 2 for the register-Q
// tile (<= 128 registers at 256 threads; its shared memory allows 2 on sm_90 for every format and
// on sm_80 for the FP8 formats), else 1.
template <class Shape>
inline constexpr int kDecodeMinCtas = kIsRegisterQShape<Shape> ? 2 : 1;

// Direct tail: the 16-row compact v32_fp8 tile gathers each row's bf16 RoPE tail (the last 128 B
// of the 656-B row) straight into the bf16 tile instead of through `raw`, once every warp has
// finished the previous block's scores (only QK^T reads those 64 dims; P.V reads the first 512).
// `raw` shrinks by 32 x 128 B and the CTA from 79,872 to 75,776 B of shared memory, so 3 CTAs
// fit an sm_90 SM instead of 2 (3 x (75,776 + 1,024 reserved) <= 233,472), as 3 already did for
// v4_fp8 (71,680 B). Needs one row group: the softmax's row-group barrier, after which the tail
// is gathered, must be CTA-wide. Never paired (kCanPairHeadGroups).
template <class Shape, class Traits>
inline constexpr bool kDirectTail = Traits::kQuantDims > 0 && Traits::kScalesInRow &&
                                    Shape::kBlockKeys == 32 && Shape::kRowGroups == 1 &&
                                    !kIsRegisterQShape<Shape>;

// Quantized caches: raw token bytes are gathered (cp.async) into `raw` while the previous block
// is being multiplied, then dequantised into the single bf16 tile. bf16 caches: rows go straight
// into a double-buffered tile and `raw` is unused.
template <class Traits, bool kDirectTailRows = false>
struct RawRow {
  static constexpr bool kQuantized = Traits::kQuantDims > 0;
  // Bytes of the data row gathered into raw: all of it, or up to its bf16 tail for direct-tail
  // tiles.
  static constexpr int kDataBytes = kDirectTailRows ? Traits::kTailOffset : Traits::kDataRowBytes;
  // the gathered data, then (split-scale formats) the token's scale row; 16-B rounded for
  // cp.async.
  static constexpr int kBytes = kDataBytes + (Traits::kScalesInRow ? 0 : Traits::kScaleRowBytes);
  static constexpr int kPitch = (kBytes + 15) / 16 * 16;
  static constexpr int kScaleBase =
      Traits::kScalesInRow ? Traits::kScaleOffset : Traits::kDataRowBytes;
  static_assert(!kQuantized || Traits::kDataRowBytes % 16 == 0,
                "token data rows are gathered in 16-B chunks");
  static_assert(Traits::kTailOffset % 16 == 0, "the bf16 tail is copied in 16-B chunks");
  static_assert(!kDirectTailRows ||
                    (Traits::kScalesInRow &&
                     Traits::kTailOffset + 2 * Traits::kTailDims == Traits::kDataRowBytes &&
                     Traits::kScaleOffset + 4 * Traits::kNumScales <= Traits::kTailOffset &&
                     Traits::kQuantDims == 512),
                "a direct tail is the end of the data row, after the fp32 scales, and the "
                "dequantisation's first pass covers exactly the 64 e4m3 chunks");
};

template <class Shape, class Traits>
using RawRowOf = RawRow<Traits, kDirectTail<Shape, Traits>>;

// Whether a tile may run as paired head groups (decode_pair_clusters; the host pairs only 64-row
// tiles on sm_90): quantized caches without a direct tail, whose peer-half byte count
// (the kernel's kHalfTileBytes) would include the tail that a direct-tail tile never stores.
template <class Shape, class Traits>
inline constexpr bool kCanPairHeadGroups = Traits::kQuantDims > 0 && !kDirectTail<Shape, Traits>;

// Shared memory, in bytes (64 rows, 64 keys): v32_fp8 73,728 Q + 73,728 bf16 KV + 8,192 P +
// 41,984 raw + 2,048 row statistics + 520 row addresses + 128 flags, padded by alignment to
// 200,704 (sizeof); bf16 cache, 576 dims: 73,728 Q + 2 x 73,728 KV + 8,192 P + statistics and
// addresses = 232,448 (sizeof): exactly sm_90's per-block limit, no headroom left.
template <class Shape, class Traits>
struct DecodeSmem {
  static constexpr bool kQuantized = RawRowOf<Shape, Traits>::kQuantized;
  static constexpr int kTileStages = kQuantized ? 1 : 2;
  static constexpr int kRawBytes =
      kQuantized ? Shape::kBlockKeys * RawRowOf<Shape, Traits>::kPitch : 16;
  static constexpr int kScaleRows = Traits::kScalesInRow ? 1 : Shape::kBlockKeys;

  alignas(1024) uint8_t q[Shape::kQBytes];                     // [kRows, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[kTileStages][Shape::kKvTileBytes];  // [stages][keys, d_qk] bf16
  alignas(1024) uint8_t p[Shape::kPBytes];                     // [kRows, 64] bf16, swizzled
  alignas(16) uint8_t raw[kRawBytes];                          // [keys, kPitch] raw token bytes
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
inline constexpr int kSmemPerSmSm90 = 233472;    // 228 KiB
inline constexpr int kSmemReservedPerCta = 1024;  // the driver's per-CTA reservation
static_assert(2 * (sizeof(DecodeSmem<DecodeShape<576, 16, 32>,
                                     KvTraits<KvCacheFormat::kBf16, 576>>) +
                   kSmemReservedPerCta) <= kSmemPerSmSm90);

}  // namespace sparse_mla::cuda::portable_decode
