// Compile-time constants and shared-memory plan of the Hopper "seesaw" kernels: a CTA of three
// warpgroups (two consumers, seesaw/consumers.cuh, and one producer) over work items of 64 heads
// (the wgmma M), whose 64-key blocks come in pairs through a two-stage ring of bf16 tiles filled in
// half-stages. The producer and the work items are each kernel's own (sparse_prefill/config.cuh).
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::sm90a {

inline constexpr int kHeadRows = 64;   // wgmma M: heads per CTA
inline constexpr int kBlockKeys = 64;  // keys per ring stage: one block, scored by one consumer
inline constexpr int kStages = 2;      // 2 x 72 KiB of KV + 72 KiB of Q fill 227 KiB at d_qk 576
inline constexpr int kThreads = 384;   // 3 warpgroups
inline constexpr int kConsumerThreads = 256;
inline constexpr int kProducerThreads = 128;
// Register caps after setmaxnreg. The launch (__launch_bounds__(kThreads, 1)) gives every thread
// kEntryRegs = 64 Ki / 384 rounded down to a multiple of 8 = 168 registers, and setmaxnreg.inc
// gets only what the CTA's .dec released, so the three caps may sum to 3 x 168 = 504 at most
// (208 / 208 / 96, summing to 512, hung every launch on an H100:
// benchmarks/results/sm90a-paired-head-groups-h100-2026-12-07/). 2 x 216 + 72 = 504. A consumer
// holds 128 fp32 of O, 32 of S and 16 of P.
inline constexpr int kEntryRegs = (65536 / kThreads) / 8 * 8;
inline constexpr int kConsumerRegs = 216;
inline constexpr int kProducerRegs = 72;
static_assert(2 * kConsumerRegs + kProducerRegs <= 3 * kEntryRegs,
              "setmaxnreg.inc would wait forever for registers no warpgroup released");

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
  // The Q tile's rows and panel stride, by which the producers copy Q (the heads-in-N kernels'
  // plan, heads_in_n/config.cuh, has fewer rows).
  static constexpr int kQRows = kHeadRows;
  static constexpr int kQPanelBytes = kPanelBytes;
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

inline constexpr uint32_t kEmptyArrivals = kConsumerThreads / 2 / 32;  // one warpgroup's warps
inline constexpr uint32_t kQEmptyArrivals = kConsumerThreads / 32;     // both warpgroups' warps

}  // namespace sparse_mla::cuda::sm90a
