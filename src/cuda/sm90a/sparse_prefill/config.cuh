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

#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a_prefill {

using namespace ::sparse_mla::cuda::sm90a;  // the seesaw's plan and consumers

// Full barrier of a half-stage: the producer's 128 cp.async arrivals plus one plain arrival per
// group of 8 threads (after writing the block's validity flags).
inline constexpr uint32_t kFullArrivals = kProducerThreads + kProducerThreads / 8;

}  // namespace sparse_mla::cuda::sm90a_prefill
