// The 64-row portable prefill kernel (h_q > 32; config.cuh WideShape,
// common/wide_tile_attention.cuh): one CTA = one query token x 64 heads, 8 warps, the token's slots
// in 64-key blocks, double-buffered cp.async gathers. Per block i: wait for block i's rows,
// __syncthreads; score (split d_qk), issuing block i+1's rows into the other buffer one cp.async
// per k-step; fetch block i+2's indices; exchange -> softmax (2 __syncthreads) -> accumulate.
// No address staging in shared memory: each thread gathers 16-B chunks q, q+4, ... of one row
// (row = thread / 4), so it needs one index per block.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/params.h"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/common/wide_tile_attention.cuh"
#include "cuda/portable/sparse_prefill/config.cuh"
#include "cuda/prefill/token_slots.cuh"

namespace sparse_mla::cuda::portable_prefill {

// One 64-row tile of rows: thread t copies chunks (t % 4) + 4j, j < kCopies, of row t / 4 (4
// threads cover a 64-B run of a row; a warp's 16-B writes land on 8 rows x 4 chunks = all 8 bank
// groups, 4 times), one copy(j) at a time or all at once. Invalid rows are zero-filled from `src`.
template <class Shape>
struct WideRowCopies {
  static constexpr int kCopies = Shape::kChunksPerRow / 4;
  uint32_t tile;
  const uint8_t* src;
  uint32_t bytes;  // 16, or 0 (zero fill) for an invalid row
  int row, lane_chunk;

  __device__ __forceinline__ WideRowCopies(uint32_t tile_, int thread, const uint8_t* src_,
                                           bool valid)
      : tile(tile_), src(src_), bytes(valid ? 16u : 0u), row(thread >> 2), lane_chunk(thread & 3) {}
  __device__ __forceinline__ void copy(int j) const {
    const int chunk = lane_chunk + 4 * j;
    ptx::cp_async_cg_16(tile + tile_chunk_offset<Shape::kRows>(row, chunk), src + 16 * chunk,
                        bytes);
  }
  __device__ __forceinline__ void copy_all() const {
#pragma unroll
    for (int j = 0; j < kCopies; ++j) copy(j);
  }
};

template <class Shape>
__device__ __forceinline__ void wide_gather_row(uint32_t tile, int thread, const uint8_t* src,
                                                bool valid) {
  WideRowCopies<Shape>(tile, thread, src, valid).copy_all();
}

// Index of this thread's row in block `block`, -1 past the valid prefix.
template <class Shape>
__device__ __forceinline__ int32_t wide_row_index(const int32_t* token_indices, int64_t n_valid,
                                                  int block, int thread) {
  const int64_t k = static_cast<int64_t>(block) * Shape::kBlockKeys + (thread >> 2);
  return k < n_valid ? __ldg(token_indices + k) : -1;
}

// This thread's copies of block `block` (its row has index `index`) into buffer block & 1; the
// row's validity (0 <= index < s_kv) is recorded at once. Invalid rows are zero-filled from row 0's
// address.
template <class Shape>
__device__ __forceinline__ WideRowCopies<Shape> wide_block_copies(const detail::PrefillParams& p,
                                                                  int32_t index, int block,
                                                                  int thread, WideSmem<Shape>& sm) {
  const bool valid = index >= 0 && index < p.problem.s_kv;
  const WideRowCopies<Shape> copies(
      smem_u32(sm.kv[block & 1]), thread,
      reinterpret_cast<const uint8_t*>(p.kv +
                                       (valid ? static_cast<int64_t>(index) * p.kv_stride_s : 0)),
      valid);
  if (copies.lane_chunk == 0) sm.valid[block & 1][copies.row] = valid ? 1 : 0;
  return copies;
}

// finish + store: row sums over the key halves; owners (kh 0) write lse, max_logits and the
// rows' output scales; every warp stores its 64 rows x 64 columns. Heads >= h_q are skipped; a
// head with no valid slot gets out 0, lse +inf, max_logits -inf.
template <class Shape>
__device__ __forceinline__ void wide_store(const detail::PrefillParams& p, int64_t token, int head0,
                                           const WidePlace& w, const WideAccum<Shape>& acc,
                                           WideSmem<Shape>& sm) {
  const int gq = w.lane >> 2, t = w.lane & 3;
  const int h_q = static_cast<int>(p.problem.h_q);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float l = quad_sum(acc.l[half]);
    if (t == 0) sm.red[w.kh][w.own_row0 + 8 * half + gq] = l;
  }
  __syncthreads();
  if (w.kh == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = w.own_row0 + 8 * half + gq;
      const int head = head0 + row;
      const float l = sm.red[0][row] + sm.red[1][row];
      const float m = acc.m[half];
      const bool empty = !(l > 0.0f);
      const float* sink =
          p.attn_sink != nullptr && head < h_q ? p.attn_sink + head * p.attn_sink_stride : nullptr;
      if (t == 0) {
        sm.out_scale[row] = empty ? 0.0f : output_scale(m, l, sink);
        if (head < h_q) {
          p.lse[token * p.lse_stride_s + head * p.lse_stride_h] =
              empty ? INFINITY : (m + log2f(l)) * kLn2;
          p.max_logits[token * p.max_logits_stride_s + head * p.max_logits_stride_h] =
              empty ? -INFINITY : m * kLn2;
        }
      }
    }
  }
  __syncthreads();
  wide_for_each_row(acc, w, [&](int row, int col, const float(&o)[8][4], int i0) {
    const int head = head0 + row;
    if (head >= h_q) return;
    const float scale = sm.out_scale[row];
    uint16_t* out_row = p.out + token * p.out_stride_s + head * p.out_stride_h + col;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      *reinterpret_cast<uint32_t*>(out_row + 8 * n) =
          ptx::pack_bf16x2(o[n][i0] * scale, o[n][i0 + 1] * scale);
    }
  });
}

template <class Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    portable_sparse_prefill_wide_kernel(const detail::PrefillParams p, int head_groups) {
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& sm = *reinterpret_cast<WideSmem<Shape>*>(smem_bytes);
  const int thread = threadIdx.x;
  const int64_t token = blockIdx.x / head_groups;
  const int head0 = static_cast<int>(blockIdx.x % head_groups) * Shape::kRows;

  const prefill::TokenSlots slots = prefill::token_slots<Shape::kBlockKeys>(p, token);
  const int64_t n_valid = slots.n_valid;
  const int num_blocks = slots.num_blocks;
  const int32_t* token_indices = slots.indices;

  {  // Q: this thread's row is head head0 + thread / 4; heads >= h_q are zero-filled.
    const int head = head0 + (thread >> 2);
    const bool valid = head < p.problem.h_q;
    const auto* src = reinterpret_cast<const uint8_t*>(p.q + token * p.q_stride_s +
                                                       (valid ? head : 0) * p.q_stride_h);
    wide_gather_row<Shape>(smem_u32(sm.q), thread, src, valid);
  }
  if (num_blocks > 0) {
    wide_block_copies<Shape>(p, wide_row_index<Shape>(token_indices, n_valid, 0, thread), 0, thread,
                             sm)
        .copy_all();
  }
  ptx::cp_async_commit();
  int32_t next_index = wide_row_index<Shape>(token_indices, n_valid, 1, thread);

  const WidePlace w = wide_place(thread);
  WideAccum<Shape> acc;
  acc.reset();
  const float scale_log2 = p.sm_scale * kLog2e;

  // The next block's gather is spread over QK^T: one cp.async per k-step (kCopies == the warp's
  // 2 * kPanels k-steps), so the LSU takes the copies between the ldmatrix/mma work instead of
  // in one burst of kCopies per thread before it. The ncu profile of the burst (7030ba7): ~10 % of
  // the stall samples were long-scoreboard waits of instructions that reuse an LDGSTS's address
  // registers (inferred: the warps wait for the LSU to take the burst; stall_mio itself was ~2 %);
  // interleaved, H200 A/B 0.965-0.982 on the 64-row prefill.
  static_assert(WideRowCopies<Shape>::kCopies == 2 * Shape::kPanels);
  for (int block = 0; block < num_blocks; ++block) {
    ptx::cp_async_wait<0>();
    __syncthreads();  // block's rows landed; every warp is done with the other buffer and P
    const bool has_next = block + 1 < num_blocks;
    const WideRowCopies<Shape> next =
        wide_block_copies<Shape>(p, has_next ? next_index : -1, block + 1, thread, sm);
    const uint32_t kv_tile = smem_u32(sm.kv[block & 1]);
    float s[2][4][4], own[4][4];
    wide_score<Shape>(smem_u32(sm.q), kv_tile, w, s, [&](int step) {
      if (has_next) next.copy(step);
    });
    ptx::cp_async_commit();
    if (has_next) next_index = wide_row_index<Shape>(token_indices, n_valid, block + 2, thread);
    wide_exchange(s, reinterpret_cast<float*>(sm.p), w, own);
    wide_softmax<Shape>(own, sm.valid[block & 1], scale_log2, sm.red, sm.alpha, sm.p, w, acc);
    wide_accumulate<Shape>(smem_u32(sm.p), kv_tile, sm.alpha, w, acc);
  }
  ptx::cp_async_wait<0>();
  wide_store<Shape>(p, token, head0, w, acc, sm);
}

}  // namespace sparse_mla::cuda::portable_prefill
