// Compile-time configuration and shared-memory plan of the Hopper sparse prefill kernel
// (docs/kernels/sm90a_sparse_prefill.md). A work item = one query token x 64 heads (the wgmma M);
// 128 heads are two items. A persistent grid of one CTA per SM walks the items. Blocks of 64 keys
// come in pairs (K0 = ring stage 0, K1 = stage 1), and three warpgroups run the "seesaw" schedule:
//   WG0, WG1  consumers: WG w scores block K_w on its own (S = Q K^T, m64n64k16, both operands
//             from shared memory) and owns output columns [256 w, +256) of both blocks
//             (O += P V, m64n256k16: its own P from registers, the peer's P from a shared tile;
//             V = the first 512 dims of the K tile read MN-major, so each row is gathered once
//             and serves both products). They exchange row maxima so that both blocks' P share
//             one running max, and stagger, so that one warpgroup's softmax runs while the other's
//             MMAs keep the tensor cores busy.
//   WG2       producer: gathers Q once and each pair's rows with cp.async (zero-filled for
//             invalid slots) into the 2-stage ring, in half-stages (panels 0-3: the dims of the
//             left output half; panels 4..: the rest) in the order the consumers free them:
//             K0 left, K1 right, K0 right, K1 left.
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::sm90a_prefill {

inline constexpr int kHeadRows = 64;   // wgmma M: heads per CTA
inline constexpr int kBlockKeys = 64;  // keys per ring stage: one block, scored by one consumer
inline constexpr int kStages = 2;      // 2 x 72 KiB of KV + 72 KiB of Q fill 227 KiB at d_qk 576
inline constexpr int kThreads = 384;   // 3 warpgroups
inline constexpr int kConsumerThreads = 256;
inline constexpr int kProducerThreads = 128;
// Register caps after setmaxnreg: 2 x 216 + 72 = 504 <= 512 per thread-slot of the SM's 64 Ki
// registers at one CTA of 384 threads. A consumer holds 128 fp32 of O, 32 of S and 16 of P.
inline constexpr int kConsumerRegs = 216;
inline constexpr int kProducerRegs = 72;

// Named barriers (id 0 is __syncthreads), each over the 256 consumer threads: one warpgroup
// arrives (bar.arrive), the other waits (bar.sync).
enum NamedBarrier : int {
  kWg0MaxReady = 1,  // WG0's running max after K0 is in row_max[0]
  kWg1MaxReady = 2,  // the pair's running max (after K0 and K1) is in row_max[1]
  kP0Ready = 3,      // WG0's P of K0, at the pair's max, is in the P0 tile
  kP1Ready = 4,      // WG1's P of K1 is in the P1 tile
  kRowSumReady = 5,  // both warpgroups' row sums are in row_sum
};

// Half-stages: half 0 = panels 0-3 (dims 0-255), half 1 = panels 4.. (dims 256..d_qk). Barrier
// index of (stage, half) = 2 stage + half.
inline constexpr int kLeftPanels = 4;

// A [rows][d_qk] bf16 tile as panels of [rows][64 dims], 128-B rows, 16-B chunks XOR-swizzled by
// row % 8 (the SWIZZLE_128B layout of wgmma and TMA; cuda/device/smem_tile.cuh).
template <int kDqk>
inline constexpr int kTileBytes = kHeadRows* kDqk * 2;
inline constexpr int kPanelBytes = 64 * 128;  // one [64 rows][64 dims] panel

// P tiles [64 heads, 64 keys] bf16 (one swizzled panel each): P1 in its own tile; P0 at d_qk 576
// in K0's RoPE panel (panel 8, dead once WG0's scores of the pair are done and reloaded only after
// WG1 has read P0), at d_qk 512 in a second tile.
template <int kDqk>
inline constexpr int kOwnPTiles = kDqk == 576 ? 1 : 2;

// Shared memory, d_qk 576: 73,728 Q + 2 x 73,728 KV + 8,192 P + 1,664 row statistics and
// validity + 80 barriers, rounded up to 1 KiB = 231,424 B; + 1,024 alignment slack = 232,448,
// the sm_90 limit exactly (d_qk 512: 215,040 + 1,024).
template <int kDqk>
struct Smem {
  alignas(1024) uint8_t q[kTileBytes<kDqk>];               // [64 heads, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[kStages][kTileBytes<kDqk>];     // [stage][64 keys, d_qk] bf16, swizzled
  alignas(1024) uint8_t p[kOwnPTiles<kDqk>][kPanelBytes];  // P1, then (d_qk 512) P0
  float row_max[2][kHeadRows];                             // [wg][head] running maxima, log2
  float row_sum[2][2][kHeadRows];         // [item parity][wg][head] final partial row sums
  uint8_t valid[kStages][kBlockKeys];     // [stage][key] slot validity
  alignas(8) uint64_t full[2 * kStages];  // half-stage landed: 128 cp.async + 16 arrivals
  uint64_t empty[2 * kStages];            // half-stage free: one arrival per warp of its reader
  uint64_t q_full;                        // Q landed: 128 cp.async arrivals
  uint64_t q_empty;                       // the item's last scores done: one arrival per warp
};

inline constexpr int kMaxSmemSm90 = 232448;
static_assert(sizeof(Smem<576>) + 1024 <= kMaxSmemSm90);
static_assert(sizeof(Smem<512>) + 1024 <= kMaxSmemSm90);

inline constexpr uint32_t kFullArrivals = kProducerThreads + kProducerThreads / 8;
inline constexpr uint32_t kEmptyArrivals = kConsumerThreads / 2 / 32;  // one warpgroup's warps
inline constexpr uint32_t kQEmptyArrivals = kConsumerThreads / 32;     // both warpgroups' warps

}  // namespace sparse_mla::cuda::sm90a_prefill
