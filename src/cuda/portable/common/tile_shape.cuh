// The warp tiling shared by the portable prefill and decode kernels. A CTA owns kRows query rows
// (heads of one query token; rows >= h_q are zero and never stored) and walks that query's KV
// slots in blocks of kBlockKeys (64, or 32 for the compact decode tiles) gathered rows. Warps form
// kRowGroups x 4: the 4 warps of a row group share kMTiles m16 tiles of rows; warp k of the group
// scores keys [k*kKeysPerWarp, (k+1)*kKeysPerWarp) of each block (QK^T; 16 or 8 keys = 2 or 1 n8
// tiles; with 8, the pair k, k ^ 1 computes them as halves of d_qk, tile_attention.cuh) and
// accumulates output columns [128k, 128k+128) (PV), so the O accumulator
// (kMTiles x 16 n8-tiles x 4 fp32) fits registers and P crosses warps through shared memory.
// TileDims holds the sizes this tiling shares with the other two shapes (the 64-row prefill's
// WideShape, the decode's 16-row RegisterQShape).
#pragma once

namespace sparse_mla::cuda {

// The sizes every portable tile shape shares (TileShape below, the 64-row prefill's WideShape, the
// decode's RegisterQShape): d_qk, head rows, warps and keys per block, and what follows from them.
template <int kDqkValue, int kRowsValue, int kWarpsValue, int kBlockKeysValue>
struct TileDims {
  static constexpr int kDqk = kDqkValue;  // 576 (V3.2) or 512 (V4)
  static constexpr int kDv = 512;         // SPEC: V = the first 512 dims of the row
  static constexpr int kRows = kRowsValue;
  static constexpr int kWarps = kWarpsValue;
  static constexpr int kThreads = kWarps * 32;
  // 64 keys per block: the m16n8k16 P.V step needs multiples of 16; 64 matches FlashMLA's
  // B_TOPK, and one bf16 block of 576 dims is 72 KiB, of which two (double buffering) plus Q fit
  // the 227 KiB opt-in smem of sm_90. 32 keys: the compact decode tiles (half the KV smem: more
  // CTAs per SM at small head counts, and configurations that fit sm_80/sm_86/sm_89).
  static constexpr int kBlockKeys = kBlockKeysValue;
  static constexpr int kChunksPerRow = kDqk / 8;  // 16-B chunks of a bf16 row
  static constexpr int kPanels = kDqk / 64;       // 64-dim panels of a row: 9 or 8
  static constexpr int kQBytes = kRows * kDqk * 2;
  static constexpr int kKvTileBytes = kBlockKeys * kDqk * 2;
  // P rows are swizzled 128-B rows (tile_chunk_offset) whatever kBlockKeys: [kRows, 64] bf16.
  static constexpr int kPBytes = kRows * 64 * 2;

  static_assert(kDqk == 576 || kDqk == 512, "d_qk must be 576 or 512");
  static_assert(kBlockKeys == 64 || kBlockKeys == 32, "keys per block: 64 or 32");
};

template <int kDqkValue, int kRowsValue, int kWarpsValue, int kBlockKeysValue = 64>
struct TileShape : TileDims<kDqkValue, kRowsValue, kWarpsValue, kBlockKeysValue> {
  static constexpr int kKeyGroups = 4;  // 4 x 128 output columns = d_v
  static constexpr int kRowGroups = kWarpsValue / kKeyGroups;
  static constexpr int kMTiles = kRowsValue / 16 / kRowGroups;
  static constexpr int kKeysPerWarp = kBlockKeysValue / kKeyGroups;  // 16 or 8
  static constexpr int kKeyTiles = kKeysPerWarp / 8;                 // n8 score tiles per warp
  static constexpr int kColsPerWarp = 512 / kKeyGroups;              // 128 = sixteen n8 tiles
  static constexpr int kColTiles = kColsPerWarp / 8;

  static_assert(kRowsValue == 16 || kRowsValue == 32 || kRowsValue == 64,
                "rows per CTA: 16, 32 or 64");
  static_assert(kWarpsValue % kKeyGroups == 0 && kRowsValue % (16 * kRowGroups) == 0 &&
                    kMTiles >= 1,
                "every warp needs whole m16 tiles");
  static_assert(kMTiles <= 2, "more than 32 rows per warp would not fit the O registers");
};

}  // namespace sparse_mla::cuda
