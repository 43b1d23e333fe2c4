// The MMA core of the decode split kernel: what one CTA does with a block whose bf16 tile is in
// shared memory (score, softmax, accumulate) and how it stores a finished piece. Three cores:
//   NarrowCore  the tiling shared with the 16/32-row prefill (common/tile_attention.cuh): warps
//               of a row group score 16 keys each over all of d_qk (8-key warps: the two of a
//               pair score 16 keys over half of d_qk each and swap partial sums) and accumulate
//               128 output columns. The 16 x 64, 32 x 32, 32 x 64 and 64 x 32 tiles.
//   RegisterQCore  the 16-row x 32-key tile on 8 warps with Q's fragments in registers
//               (register_q_core.cuh).
//   WideCore    the 64-row x 64-key tiling of the 64-row prefill (common/wide_tile_attention.cuh):
//               QK^T split over d_qk in 32x32 warp tiles, P.V in 64-row x 64-column warp tiles,
//               ~20 % fewer shared-memory bytes per block (the bound of this core on the H200;
//               docs/kernels/portable_sparse_prefill.md, "Versions tried").
// DecodeCore<Shape> picks one; each names its warp placement (Place, place(thread)), running
// state (Accum) and what it does when a piece's Q has landed (begin_piece). All use only
// DecodeSmem's q, p and statistics arrays.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/params.h"
#include "cuda/decode/piece_target.cuh"
#include "cuda/device/online_softmax.cuh"
#include "cuda/portable/common/tile_attention.cuh"
#include "cuda/portable/common/wide_tile_attention.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/register_q_core.cuh"

namespace sparse_mla::cuda::portable_decode {

template <class Shape>
struct NarrowCore {
  using Place = WarpPlace;
  using Accum = WarpAccum<Shape>;
  __device__ __forceinline__ static Place place(int thread) { return warp_place<Shape>(thread); }
  template <class Smem>
  __device__ __forceinline__ static void begin_piece(Smem&, const Place&, Accum&) {}  // Q: smem
  template <class Smem>
  __device__ __forceinline__ static void process_block(Smem& sm, uint32_t tile,
                                                       const uint8_t* valid, float scale_log2,
                                                       const Place& w, Accum& acc) {
    ScoreTile<Shape> scores;
    score_block<Shape>(smem_u32(sm.q), tile, w, scores, reinterpret_cast<float*>(sm.p));
    softmax_block<Shape>(scores, valid, scale_log2, sm.red_max, sm.p, w, acc);
    accumulate_block<Shape>(smem_u32(sm.p), tile, w, acc);
  }
  template <class Smem>
  __device__ __forceinline__ static void store(Smem& sm, const PieceTarget& to, const Place& w,
                                               const Accum& acc) {
    float l_total[Shape::kMTiles][2];
    finish_rows<Shape>(acc, sm.red_sum, w, l_total);
    const int64_t h_q = to.launch->p.problem.h_q;
    const int g = w.lane >> 2, t = w.lane & 3;
#pragma unroll
    for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int head = to.head0 + w.row0 + mt * 16 + half * 8 + g;
        if (head >= h_q) continue;
        const float scale =
            finish_row(to, head, acc.m[mt][half], l_total[mt][half], w.key_group == 0 && t == 0);
        store_row(to, head, w.col0 + 2 * t, acc.o[mt], 2 * half, scale);
      }
    }
  }
};

// Statistics arrays of DecodeSmem as the wide tiling uses them: red [2][64] (row max, then row
// sums, per key half) and alpha [64] in red_max, the rows' output scales in red_sum.
template <class Shape>
struct WideCore {
  using Place = WidePlace;
  using Accum = WideAccum<Shape>;
  __device__ __forceinline__ static Place place(int thread) { return wide_place(thread); }
  template <class Smem>
  __device__ __forceinline__ static void begin_piece(Smem&, const Place&, Accum&) {}  // Q: smem
  static_assert(Shape::kRows == 64 && Shape::kBlockKeys == 64 && Shape::kWarps == 8);
  static_assert(Shape::kKeyGroups * Shape::kRows >= 3 * 64, "red + alpha fit red_max");

  template <class Smem>
  __device__ __forceinline__ static float (&red(Smem& sm))[2][64] {
    return *reinterpret_cast<float(*)[2][64]>(sm.red_max);
  }
  template <class Smem>
  __device__ __forceinline__ static float* alpha(Smem& sm) {
    return sm.red_max + 2 * 64;
  }
  template <class Smem>
  __device__ __forceinline__ static void process_block(Smem& sm, uint32_t tile,
                                                       const uint8_t* valid, float scale_log2,
                                                       const Place& w, Accum& acc) {
    float s[2][4][4], own[4][4];
    wide_score<Shape>(smem_u32(sm.q), tile, w, s);
    // The exchange's scratch is the P tile, free until the softmax writes P (after its first
    // __syncthreads, which every exchange read precedes).
    wide_exchange(s, reinterpret_cast<float*>(sm.p), w, own);
    wide_softmax<Shape>(own, valid, scale_log2, red(sm), alpha(sm), sm.p, w, acc);
    wide_accumulate<Shape>(smem_u32(sm.p), tile, alpha(sm), w, acc);
  }
  // Row sums over the key halves; the owners (kh 0) write lse and the rows' scales; then every
  // warp stores its 64 rows x 64 columns.
  template <class Smem>
  __device__ __forceinline__ static void store(Smem& sm, const PieceTarget& to, const Place& w,
                                               const Accum& acc) {
    const int64_t h_q = to.launch->p.problem.h_q;
    const int gq = w.lane >> 2, t = w.lane & 3;
    float(&sums)[2][64] = red(sm);
    float* out_scale = sm.red_sum;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = quad_sum(acc.l[half]);
      if (t == 0) sums[w.kh][w.own_row0 + 8 * half + gq] = l;
    }
    __syncthreads();
    if (w.kh == 0 && t == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = w.own_row0 + 8 * half + gq;
        const int head = to.head0 + row;
        if (head < h_q) {
          out_scale[row] = finish_row(to, head, acc.m[half], sums[0][row] + sums[1][row], true);
        }
      }
    }
    __syncthreads();
    wide_for_each_row(acc, w, [&](int row, int col, const float(&o)[8][4], int i0) {
      const int head = to.head0 + row;
      if (head < h_q) store_row(to, head, col, o, i0, out_scale[row]);
    });
  }
};

template <class Shape>
using DecodeCore =
    std::conditional_t<kIsRegisterQShape<Shape>, RegisterQCore<Shape>,
                       std::conditional_t<Shape::kRows == 64 && Shape::kBlockKeys == 64,
                                          WideCore<Shape>, NarrowCore<Shape>>>;

}  // namespace sparse_mla::cuda::portable_decode
