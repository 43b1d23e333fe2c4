// Compile-time configuration and shared-memory plan of the Hopper sparse prefill kernel
// (docs/kernels/sm90a_sparse_prefill.md). One CTA = one query token x 64 heads (the wgmma M);
// 128 heads are two CTAs. Three warpgroups:
//   WG0, WG1  consumers: both work on the same 64-key block. WG w scores keys [32 w, +32) of it
//             (S = Q K^T, m64n32k16, A = Q and B = K from shared memory), the two exchange row
//             maxima and their bf16 P halves through shared memory, and WG w accumulates output
//             columns [256 w, +256) over all 64 keys (O += P V, m64n256k16: its own P half from
//             registers, the peer's from shared memory; V = the first 512 dims of the K tile read
//             MN-major, so each row is gathered once and serves both products).
//   WG2       producer: gathers Q once and each block's 64 rows with cp.async (zero-filled for
//             invalid slots) into a 2-stage ring; mbarriers hand stages over (full: rows landed;
//             empty: both consumer warpgroups finished the block).
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::sm90a_prefill {

inline constexpr int kHeadRows = 64;   // wgmma M: heads per CTA
inline constexpr int kBlockKeys = 64;  // keys per ring stage; each consumer scores half
inline constexpr int kStages = 2;      // 2 x 72 KiB of KV + 72 KiB of Q fill 227 KiB at d_qk 576
inline constexpr int kThreads = 384;   // 3 warpgroups
inline constexpr int kConsumerThreads = 256;
inline constexpr int kProducerThreads = 128;
// Register caps after setmaxnreg: 2 x 216 + 72 = 504 <= 512 per thread-slot of the SM's 64 Ki
// registers at one CTA of 384 threads. A consumer holds 128 fp32 of O, 16 of S and 8 of P.
inline constexpr int kConsumerRegs = 216;
inline constexpr int kProducerRegs = 72;

// Named barriers (id 0 is __syncthreads), each over the 256 consumer threads.
enum NamedBarrier : int { kRowMaxReady = 1, kPReady = 2, kRowSumReady = 3 };

// A [rows][d_qk] bf16 tile as panels of [rows][64 dims], 128-B rows, 16-B chunks XOR-swizzled by
// row % 8 (the SWIZZLE_128B layout of wgmma and TMA; cuda/device/smem_tile.cuh).
template <int kDqk>
inline constexpr int kTileBytes = kHeadRows* kDqk * 2;
inline constexpr int kPanelBytes = 64 * 128;  // one [64 rows][64 dims] panel

// Shared memory, d_qk 576: 73,728 Q + 2 x 73,728 KV + 8,192 P + 1,152 row statistics and
// validity + 40 barriers, rounded up to 1 KiB = 231,424 B; + 1,024 alignment slack = 232,448,
// the sm_90 limit exactly (d_qk 512: 206,848 + 1,024).
template <int kDqk>
struct Smem {
  alignas(1024) uint8_t q[kTileBytes<kDqk>];            // [64 heads, d_qk] bf16, swizzled
  alignas(1024) uint8_t kv[kStages][kTileBytes<kDqk>];  // [stage][64 keys, d_qk] bf16, swizzled
  alignas(1024) uint8_t p[kPanelBytes];  // [64 heads, 64 keys] bf16 P, WG w writes keys [32 w, +32)
  float row_max[2][kHeadRows];           // [wg][head] this block's row maxima (log2 domain)
  float row_sum[2][kHeadRows];           // [wg][head] final partial row sums
  uint8_t valid[kStages][kBlockKeys];    // [stage][key] slot validity
  alignas(8) uint64_t full[kStages];     // rows landed: 128 cp.async + 16 flag-writer arrivals
  uint64_t empty[kStages];               // stage free: one arrival per consumer warp (8)
  uint64_t q_full;                       // Q landed: 128 cp.async arrivals
};

inline constexpr int kMaxSmemSm90 = 232448;
static_assert(sizeof(Smem<576>) + 1024 <= kMaxSmemSm90);
static_assert(sizeof(Smem<512>) + 1024 <= kMaxSmemSm90);

inline constexpr uint32_t kFullArrivals = kProducerThreads + kProducerThreads / 8;
inline constexpr uint32_t kEmptyArrivals = kConsumerThreads / 32;

}  // namespace sparse_mla::cuda::sm90a_prefill
