// Compile-time configuration of the Hopper sparse decode kernel
// (docs/kernels/sm90a_sparse_decode.md): the seesaw CTA of the prefill (seesaw/config.cuh,
// seesaw/consumers.cuh) over decode pieces, with a producer that gathers FP8 token rows and
// dequantises them to bf16 in the ring.
//
// A work item is one piece of the split schedule (planning/decode_schedule.h): one query's blocks
// [begin, end) of its main list then its extra list, for one group of 64 heads (grid (parts, head
// groups)). Per half-stage the producer copies the raw e4m3 bytes of its rows with cp.async into
// the upper part of the half-stage's own fp8 panels (there is no shared memory left for a separate
// raw stage: Q 72 KiB + 2 x 72 KiB of ring + the P tile fill 227 KiB at d_qk 576), converts them
// in place in two phases around a producer barrier, and copies the bf16 tail (RoPE) straight into
// its panel.
#pragma once

#include <cstdint>

#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a_decode {

using namespace ::sparse_mla::cuda::sm90a;  // the seesaw's plan and consumers

// Full barrier of a half-stage: one arrival per producer thread, once its converted chunks are
// stored and fenced for the async proxy and its tail copies have landed.
inline constexpr uint32_t kFullArrivals = kProducerThreads;

// The producer warpgroup's own barrier (ids 1-5 are the consumers'): between reading the raw
// bytes a half-stage's second conversion phase overwrites and writing them.
inline constexpr int kProducerBarrier = 6;

// A half-stage's fp8 panels (64 dims each): half 0 = panels 0-3; half 1 = panels 4 .. the last
// quantized one (v32_fp8: 4-7, v4_fp8: 4-6). Their raw bytes, [64 rows][panels x 64 B], sit in
// the upper half of those panels' bytes; phase 1 converts panels [0, panels / 2), which end below
// the raw bytes, phase 2 the rest, from registers loaded before the barrier.
template <int kQuantDims, int kHalf>
inline constexpr int kFp8Panels = kHalf == 0 ? kLeftPanels : kQuantDims / 64 - kLeftPanels;

}  // namespace sparse_mla::cuda::sm90a_decode
