// Shared-memory plan and constants of the Hopper prefill with the heads in the wgmma N dimension
// (sparse_prefill/heads_in_n_kernel.cuh: the default at 1..16 heads, SMLA_PREFILL_SM90A_HEADS_IN_N;
// docs/kernels/sm90a_sparse_prefill.md). A decode on the same consumers lost and was removed
// (docs/kernels/sm90a_sparse_decode.md, v28). At 8-32 heads the seesaw pads its 64-row tile (the
// wgmma M) with zero heads and does 2-8x the MMA work the heads need. Here the keys are the M
// dimension and the heads N (16 or 32):
// - S^T [64 keys, N heads] = K Q^T: m64nNk16, A = the block's bf16 tile (K-major), B = Q (K-major);
// - O^T [512 dims, N heads] += V^T P^T: m64nNk16 per 64-dim panel, A = the same tile read
//   MN-major (transposed), B = P^T from shared memory.
// The producer and the ring of half-stages are the seesaw prefill's; the Q tile holds N rows. The
// two consumer warpgroups do not share blocks: WG w takes ring stage w of every pair (block 2 i + w
// of a work item), scores it, takes the column (head) maxima over its 64 keys, and accumulates all
// 512 output dims of its own blocks with its own running max and sums. At the item's end the two
// partial states merge through shared memory (each warpgroup keeps 256 of the dims) and each
// warpgroup stores its half. No barrier couples the two warpgroups inside an item.
#pragma once

#include <cstdint>

#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a {

// Named barriers, above the seesaw's (1-5) and the seesaw decode conversion's (6, 7):
// kColumnBarrier + wg over the warpgroup's 128 threads (its column maxima, its P^T tile,
// its bf16 staging); kMergeBarrier over the 256 consumer threads (a work item's end).
inline constexpr int kColumnBarrier = 8;
inline constexpr int kMergeBarrier = 10;
inline constexpr int kWarpgroupThreads = kConsumerThreads / 2;

inline constexpr int kValuePanels = 512 / 64;  // d_v: the M tiles of O^T

template <int kN>
struct HeadsInN {
  static_assert(kN == 16 || kN == 32, "the heads-in-N kernels take 16 or 32 heads in N");
  static constexpr int kAccRegs = kN / 2;  // an m64nN accumulator: fp32 per thread
  static constexpr int kColumns = kN / 4;  // the heads a thread's accumulators hold
  // Panels of O^T exchanged per merge round (each warpgroup sends this many of the peer's).
  static constexpr int kMergePanels = kN == 16 ? 4 : 2;
  static constexpr int kMergeRounds = (kValuePanels / 2) / kMergePanels;
};

// Shared memory at d_qk 576 and N 16 / 32: Q 18,432 / 36,864 + 2 x 73,728 of ring + P^T 4,096 /
// 8,192 + merge 32,768 + statistics, validity and barriers (static_assert below: within the
// seesaw's plan, so the instantiation's shared-memory size stays the seesaw's).
template <int kDqk, int kN>
struct HeadsInNSmem {
  static constexpr int kQRows = kN;                  // the producer's Q copy (kernel.cuh, produce)
  static constexpr int kQPanelBytes = kN * 128;      // [kN heads][64 dims] per panel
  alignas(1024) uint8_t q[kDqk / 64][kQPanelBytes];  // Q [kN, d_qk] bf16, swizzled panels
  alignas(1024) uint8_t kv[kStages][kTileBytes<kDqk>];  // the seesaw's ring
  // P^T of warpgroup w's current block: [kN heads][64 keys] bf16, one swizzled panel of kN rows.
  alignas(1024) uint8_t pt[2][kN * 128];
  // The item-end exchange: [sender wg][element][thread of the warpgroup], one round's panels
  // (merge_warpgroups). After its last round, merge[1 - w] is warpgroup w's staging for its bf16
  // out (store_bf16_heads) until the next item's statistics barrier: nothing else may touch it.
  float merge[2][HeadsInN<kN>::kMergePanels * HeadsInN<kN>::kAccRegs][kConsumerThreads / 2];
  float column_max[2][4][kN];          // [wg][warp][head]: a block's per-warp maxima
  float column_sum[2][4][kN];          // [wg][warp][head]: the item's per-warp row sums
  float column_m[2][kN];               // [wg][head]: the item's running max
  float column_true_max[2][kN];        // [wg][head]: the item's true max (the prefill's)
  uint8_t valid[kStages][kBlockKeys];  // [stage][key] slot validity (the producer's flags)
  alignas(8) uint64_t full[2 * kStages];
  uint64_t empty[2 * kStages];
  uint64_t q_full;
  uint64_t q_empty;
};

static_assert(sizeof(HeadsInNSmem<576, 32>) <= sizeof(Smem<576>));
static_assert(sizeof(HeadsInNSmem<576, 16>) <= sizeof(Smem<576>));
static_assert(sizeof(HeadsInNSmem<512, 32>) <= sizeof(Smem<512>));
static_assert(sizeof(HeadsInNSmem<512, 16>) <= sizeof(Smem<512>));

}  // namespace sparse_mla::cuda::sm90a
