// Plan of the Hopper decode's block schedule (FlashMLA's decode schedule,
// ../shared/reference/flashmla-kernels.md §4.1; docs/kernels/sm90a_sparse_decode.md): a CTA of
// three warpgroups over the pieces of its part, 64 heads x one 64-key block at a time through two
// whole-block bf16 buffers.
//   WG0, the scorer     S = Q K^T over the whole block (m64n64k16, d_qk / 16 k-steps), the online
//                       softmax, P (bf16) and each row's rescale factor into shared memory for
//                       WG1, then O[:, 0:256) += P V_L with P from registers;
//   WG1, the products   O[:, 256:512) *= alpha, += P V_R with P from shared memory;
//   WG2, the producer   block j + 1's FP8 rows gathered into registers (ld.global), dequantised
//                       (e4m3 x scale, one rounding to bf16) and stored into the other buffer
//                       while the consumers read block j.
// Paired (65..128 heads): the two head groups of a part are a 2-CTA cluster; each producer
// converts 32 of a block's 64 rows and stores them into both CTAs' buffers (st.shared, and
// st.async counted on the peer's full barrier): each row is gathered and converted once per
// cluster, FlashMLA's crossover.
#pragma once

#include <cstdint>

#include "cuda/sm90a/seesaw/config.cuh"  // kHeadRows, kBlockKeys, kTileBytes, kPanelBytes

namespace sparse_mla::cuda::sm90a_block_decode {

using sm90a::kBlockKeys;
using sm90a::kHeadRows;
using sm90a::kPanelBytes;
using sm90a::kTileBytes;

inline constexpr int kThreads = 384;
inline constexpr int kProducerThreads = 128;
inline constexpr int kConsumerThreads = 256;
// Register caps after setmaxnreg (sum <= 3 x 168 = 504, seesaw/config.cuh; .dec may not raise a
// warpgroup above the launch's 168). The scorer holds 128 fp32 of O, 32 of S and 16 of P while its
// products and the next scores are in flight (at 200 ptxas serialises its wgmmas); the products
// warpgroup its 128 of O (at 152 likewise); the producer two rows of its share in registers
// (2 x (4 units + tail + scales) x 16 B). At 104 producer registers ptxas spilled a loaded unit
// right after its load, and the spill store waited for the load, so each round's loads ran one
// after the other (ncu, benchmarks/results/sm90a-decode-block-schedule-h100-2026-12-07/); at 136
// the paired block loop has no local memory. ptxas (nvcc 13.0): 168 registers at entry, no
// serialised wgmma, 264-408 B of spills, the part's and the piece's scalars kept across the role
// split.
inline constexpr int kScorerRegs = 208;
inline constexpr int kProductRegs = 160;
inline constexpr int kProducerRegs = 136;
static_assert(kScorerRegs + kProductRegs + kProducerRegs <= 3 * sm90a::kEntryRegs,
              "setmaxnreg.inc would wait forever for registers no warpgroup released");

// Named barrier over the 256 consumer threads (id 0 is __syncthreads): WG0's final row
// statistics of a piece are in row_stats.
inline constexpr int kRowStatsReady = 1;

// Shared memory, d_qk 576: 73,728 Q + 2 x 73,728 buffers + 8,192 P + 1,408 alpha, statistics and
// flags + 64 barriers = 230,848 B, 231,424 as a 1 KiB-aligned struct; + 1,024 alignment slack =
// 232,448, the sm_90 limit exactly (d_qk 512: 206,848 + 1,024).
template <int kDqk>
struct BlockSmem {
  alignas(1024) uint8_t q[kTileBytes<kDqk>];      // [64 heads, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[2][kTileBytes<kDqk>];  // [buffer][64 keys, d_qk] bf16, swizzled
  alignas(1024) uint8_t p[kPanelBytes];           // WG0's P of the current block, swizzled
  float alpha[kHeadRows];                         // its rows' rescale factors
  float row_stats[2][2][kHeadRows];               // [piece parity][m, l][head]
  uint8_t valid[2][kBlockKeys];                   // [buffer][key] slot validity
  alignas(8) uint64_t full[2];  // buffer landed: 128 producer arrivals (+ 1 expecting the peer's)
  uint64_t empty[2];            // buffer free: each consumer warp of the cluster's CTAs
  uint64_t p_full;              // P and alpha written: WG0's 128 threads
  uint64_t p_empty;             // WG1's products of P done: WG1's 128 threads
  uint64_t q_full;              // Q landed: 128 cp.async arrivals
  uint64_t q_empty;             // the piece's last scores done: WG0's 4 warps
};

static_assert(sizeof(BlockSmem<576>) + 1024 <= sm90a::kMaxSmemSm90);
static_assert(sizeof(BlockSmem<512>) + 1024 <= sm90a::kMaxSmemSm90);

// Bytes a paired CTA's full barrier expects from its peer per block: the peer's 32 rows, bf16.
template <int kDqk>
inline constexpr uint32_t kPeerBlockBytes = 32u * kDqk * 2u;

}  // namespace sparse_mla::cuda::sm90a_block_decode
