// Compile-time configuration of the Hopper sparse decode kernel
// (docs/kernels/sm90a_sparse_decode.md): the seesaw CTA of the prefill (seesaw/config.cuh,
// seesaw/consumers.cuh) over decode pieces, with a producer that only copies FP8 token rows into
// the ring and consumers that dequantise them to bf16 in place before they score them.
//
// A work item is one piece of the split schedule (planning/decode_schedule.h): one query's blocks
// [begin, end) of its main list then its extra list, for one group of 64 heads (grid (parts, head
// groups)). Per half-stage the producer cp.asyncs the raw e4m3 bytes of its rows into the upper
// part of the half-stage's own fp8 panels (there is no shared memory left for a separate raw
// stage: Q 72 KiB + 2 x 72 KiB of ring + the P tile fill 227 KiB at d_qk 576), the rows' scales
// into its lower 512 B and the bf16 tail (RoPE) straight into its panel. The warpgroup that
// scores the half converts it in place, in two phases around a barrier of its own.
#pragma once

#include <cstdint>

#include "cuda/decode_launch_policy.h"  // kSm90aDecodeRows, kSm90aDecodeBlockKeys
#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a_decode {

using namespace ::sparse_mla::cuda::sm90a;  // the seesaw's plan and consumers

// The host's launch shape and plan (decode_launch_policy.h, kernel_tables.cpp) name the tile
// without this header; they must name this one.
static_assert(kSm90aDecodeRows == kHeadRows && kSm90aDecodeBlockKeys == kBlockKeys,
              "decode_launch_policy.h's Hopper decode tile differs from the seesaw's");

// Full barrier of a half-stage (its raw bytes, scales and tail landed): the producer's 128
// cp.async arrivals plus one plain arrival per group of 8 threads (after the block's validity
// flags), as in the prefill.
inline constexpr uint32_t kFullArrivals = kProducerThreads + kProducerThreads / 8;

// The converting warpgroup's own barrier (ids 1-5 are the seesaw's): kConvertBarrier for WG0,
// + 1 for WG1, around the phases of a half-stage's conversion (kernel.cuh, convert_half).
inline constexpr int kConvertBarrier = 6;

// A half-stage's fp8 panels (64 dims each): half 0 = panels 0-3; half 1 = panels 4 .. the last
// quantized one (v32_fp8: 4-7, v4_fp8: 4-6). Their raw bytes, [64 rows][panels x 64 B], sit in
// the upper half of those panels' bytes; phase 1 converts panels [0, panels / 2), which end below
// the raw bytes, phase 2 the rest, from registers loaded before the barrier.
template <int kQuantDims, int kHalf>
inline constexpr int kFp8Panels = kHalf == 0 ? kLeftPanels : kQuantDims / 64 - kLeftPanels;

}  // namespace sparse_mla::cuda::sm90a_decode
