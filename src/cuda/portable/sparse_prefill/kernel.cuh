// Portable (sm_80+) sparse prefill kernel (SPEC §2): mma.sync bf16 tensor cores, cp.async row
// gathers. Grid: one CTA per (query token, head group), blockIdx.x = token * head_groups + group
// (1-D, so s_q up to 2^31 / head_groups). Roles per block i of kBlockKeys (64 or 32) slots:
//   load       stage block i+1's clamped row addresses and validity, then cp.async its rows into
//              the other KV buffer (invalid rows zero-filled, never read);
//   score/softmax/accumulate  tile_attention.cuh on buffer i;
//   store      out (sink applied), max_logits and lse in natural log.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/params.h"
#include "cuda/device/gather.cuh"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/common/tile_attention.cuh"
#include "cuda/portable/sparse_prefill/config.cuh"
#include "cuda/portable/sparse_prefill/launch.h"
#include "cuda/portable/sparse_prefill/wide_kernel.cuh"
#include "cuda/prefill/token_slots.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"

namespace sparse_mla::cuda::portable_prefill {

// load (addresses): threads 0..63 resolve the block's slots. Slot k is valid iff k < n_valid
// (topk_length) and 0 <= index < s_kv; an invalid slot gets row 0's address and a zero flag.
template <class Shape>
__device__ __forceinline__ void stage_block_rows(const detail::PrefillParams& p,
                                                 const int32_t* token_indices, int64_t n_valid,
                                                 int block, int thread, PrefillSmem<Shape>& sm) {
  if (thread < Shape::kBlockKeys) {
    const int64_t k = static_cast<int64_t>(block) * Shape::kBlockKeys + thread;
    const int32_t index = k < n_valid ? __ldg(token_indices + k) : -1;
    const bool valid = index >= 0 && index < p.problem.s_kv;
    sm.row_ptr[thread] = reinterpret_cast<const uint8_t*>(
        p.kv + (valid ? static_cast<int64_t>(index) * p.kv_stride_s : 0));
    sm.valid[block & 1][thread] = valid ? 1 : 0;
  }
}

// load (rows): cp.async of the staged rows into KV buffer `block & 1`.
template <class Shape>
__device__ __forceinline__ void load_block_rows(int block, int thread, PrefillSmem<Shape>& sm) {
  const uint8_t* valid = sm.valid[block & 1];
  gather_rows_swizzled<Shape::kBlockKeys, Shape::kChunksPerRow, Shape::kThreads>(
      smem_u32(sm.kv[block & 1]), thread, [&](int row) {
        return RowSource{sm.row_ptr[row], valid[row] != 0};
      });
}

// load (Q): the head group's rows of one token; heads >= h_q are zero-filled from head 0.
template <class Shape>
__device__ __forceinline__ void load_q(const detail::PrefillParams& p, int64_t token, int head0,
                                       int thread, PrefillSmem<Shape>& sm) {
  gather_head_rows<Shape::kRows, Shape::kChunksPerRow, Shape::kThreads>(
      smem_u32(sm.q), thread, reinterpret_cast<const uint8_t*>(p.q + token * p.q_stride_s),
      p.q_stride_h * 2, static_cast<int>(p.problem.h_q), head0);
}

// store: out [s_q, h_q, d_v] bf16 (sink applied), max_logits and lse [s_q, h_q] fp32, natural log.
// A head with no valid slot: out 0, lse +inf, max_logits -inf.
template <class Shape>
__device__ __forceinline__ void store_outputs(const detail::PrefillParams& p, int64_t token,
                                              int head0, const WarpPlace& w,
                                              const WarpAccum<Shape>& acc,
                                              const float (&l_total)[Shape::kMTiles][2]) {
  const int g = w.lane >> 2, t = w.lane & 3;
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int head = head0 + w.row0 + mt * 16 + half * 8 + g;
      if (head >= p.problem.h_q) continue;
      const float m = acc.m[mt][half];
      const float l = l_total[mt][half];
      const float* sink =
          p.attn_sink != nullptr ? p.attn_sink + head * p.attn_sink_stride : nullptr;
      const float scale = l > 0.0f ? output_scale(m, l, sink) : 0.0f;
      uint16_t* out_row = p.out + token * p.out_stride_s + head * p.out_stride_h + w.col0 + 2 * t;
#pragma unroll
      for (int n = 0; n < Shape::kColTiles; ++n) {
        *reinterpret_cast<uint32_t*>(out_row + 8 * n) =
            ptx::pack_bf16x2(acc.o[mt][n][2 * half] * scale, acc.o[mt][n][2 * half + 1] * scale);
      }
      if (w.key_group == 0 && t == 0) {
        const bool empty = !(l > 0.0f);
        p.lse[token * p.lse_stride_s + head * p.lse_stride_h] =
            empty ? INFINITY : (m + log2f(l)) * kLn2;
        p.max_logits[token * p.max_logits_stride_s + head * p.max_logits_stride_h] =
            empty ? -INFINITY : m * kLn2;
      }
    }
  }
}

template <class Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1)
    portable_sparse_prefill_kernel(const detail::PrefillParams p, int head_groups) {
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& sm = *reinterpret_cast<PrefillSmem<Shape>*>(smem_bytes);
  const int thread = threadIdx.x;
  const int64_t token = blockIdx.x / head_groups;
  const int head0 = static_cast<int>(blockIdx.x % head_groups) * Shape::kRows;

  const prefill::TokenSlots slots = prefill::token_slots<Shape::kBlockKeys>(p, token);
  const int64_t n_valid = slots.n_valid;
  const int num_blocks = slots.num_blocks;
  const int32_t* token_indices = slots.indices;

  const WarpPlace w = warp_place<Shape>(thread);
  WarpAccum<Shape> acc;
  acc.reset();
  const float scale_log2 = p.sm_scale * kLog2e;

  load_q<Shape>(p, token, head0, thread, sm);
  if (num_blocks > 0) stage_block_rows<Shape>(p, token_indices, n_valid, 0, thread, sm);
  __syncthreads();
  if (num_blocks > 0) load_block_rows<Shape>(0, thread, sm);
  ptx::cp_async_commit();

  for (int block = 0; block < num_blocks; ++block) {
    ptx::cp_async_wait<0>();
    __syncthreads();  // block's rows landed; every warp is done with the other buffer
    const bool has_next = block + 1 < num_blocks;
    if (has_next) stage_block_rows<Shape>(p, token_indices, n_valid, block + 1, thread, sm);
    __syncthreads();
    if (has_next) {
      load_block_rows<Shape>(block + 1, thread, sm);
      ptx::cp_async_commit();
    }
    ScoreTile<Shape> s;
    score_block<Shape>(smem_u32(sm.q), smem_u32(sm.kv[block & 1]), w, s,
                       reinterpret_cast<float*>(sm.p));
    softmax_block<Shape>(s, sm.valid[block & 1], scale_log2, sm.red_max, sm.p, w, acc);
    accumulate_block<Shape>(smem_u32(sm.p), smem_u32(sm.kv[block & 1]), w, acc);
  }
  ptx::cp_async_wait<0>();

  float l_total[Shape::kMTiles][2];
  finish_rows<Shape>(acc, sm.red_sum, w, l_total);
  store_outputs<Shape>(p, token, head0, w, acc, l_total);
}

// 64 rows x 64 keys: the split-d_qk tiling (wide_kernel.cuh); every other tile: the shared core.
template <int kDqk, int kRows, int kBlockKeys>
inline constexpr bool kWideTile = kRows == 64 && kBlockKeys == 64;

template <int kDqk, int kRows, int kBlockKeys>
int prefill_smem_bytes() {
  if constexpr (kWideTile<kDqk, kRows, kBlockKeys>) {
    return static_cast<int>(sizeof(WideSmem<WideShape<kDqk>>));
  } else {
    return static_cast<int>(sizeof(PrefillSmem<PrefillShape<kDqk, kRows, kBlockKeys>>));
  }
}

template <int kDqk, int kRows, int kBlockKeys>
Status launch_portable_sparse_prefill(const detail::PrefillParams& p, cudaStream_t stream) {
  const int head_groups = static_cast<int>((p.problem.h_q + kRows - 1) / kRows);
  const int64_t grid = p.problem.s_q * head_groups;
  if (grid == 0) return {};
  if (grid > 0x7fffffff) {
    return unsupported("portable sparse prefill: s_q * head groups = " + std::to_string(grid) +
                       " exceeds the grid limit 2^31 - 1");
  }
  const int smem = prefill_smem_bytes<kDqk, kRows, kBlockKeys>();
  constexpr bool kWide = kWideTile<kDqk, kRows, kBlockKeys>;
  using Shape = std::conditional_t<kWide, WideShape<kDqk>, PrefillShape<kDqk, kRows, kBlockKeys>>;
  void (*kernel)(const detail::PrefillParams, int);
  if constexpr (kWide) {
    kernel = portable_sparse_prefill_wide_kernel<Shape>;
  } else {
    kernel = portable_sparse_prefill_kernel<Shape>;
  }
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  kernel<<<static_cast<unsigned>(grid), Shape::kThreads, smem, stream>>>(p, head_groups);
  return check_last_launch("portable_sparse_prefill_kernel");
}

}  // namespace sparse_mla::cuda::portable_prefill
