// The MMA core of the 16-row x 32-key decode tile (RegisterQShape, config.cuh): 8 warps on one
// 16-row m16 tile, Q's fragments held in registers for the whole piece.
//   score       warp (key_half kh, dim_quarter dq) computes a partial S for keys
//               [16 kh, 16 kh + 16) over k-step dq of every 64-dim panel (9 k-steps at d576,
//               8 at d512), B fragments from the bf16 tile, A fragments from registers: Q is
//               read from shared memory once per piece, not once per block;
//   exchange    the 4 dim-quarter warps of a key half reduce-scatter their partial sums through
//               shared memory (the Q tile, dead once its fragments are in registers): warp dq
//               owns n8 key tile (dq & 1) of row half (dq >> 1), two scores per lane;
//   softmax     8-key-group row maxima through shared memory, the same running max in every
//               warp, P = exp2(S - m) written by each owner to the P tile;
//   accumulate  warp w accumulates output columns [64 w, 64 w + 64) over the block's 32 keys.
// Why (decode note, "Versions tried"): the 4-warp 16 x 32 tile re-read Q's fragments every block
// (37 KB of its ~167 KB of shared-memory traffic per block and CTA) and ran 3 CTAs x 4 warps per
// SM; this tile reads no Q per block, ~148 KB in all, with 2 CTAs x 8 warps per SM (the O
// accumulators halve to 32 registers per thread, which is what leaves room for Q's 36).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/ldmatrix.cuh"
#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/common/tile_attention.cuh"
#include "cuda/portable/sparse_decode/config.cuh"

namespace sparse_mla::cuda::portable_decode {

// The barrier over the core's 8 warps: the whole CTA in the split kernel (kernel.cuh); a named
// barrier in the warp-specialised kernel, whose producer warps do not take part.
struct CtaBarrier {
  __device__ __forceinline__ static void sync() { __syncthreads(); }
};

template <class Shape, class Barrier = CtaBarrier>
struct RegisterQCore {
  static_assert(Shape::kRows == 16 && Shape::kBlockKeys == 32 && Shape::kWarps == 8);
  static constexpr int kColTiles = Shape::kDv / Shape::kWarps / 8;  // 8 n8 tiles = 64 columns
  // Exchange scratch in the Q tile: [2 key halves][4 owners][4 sources][32 lanes] float2.
  static_assert(2 * 4 * 4 * 32 * sizeof(float2) <= Shape::kQBytes);

  // Warp w: key half w >> 2, dim quarter w & 3; output columns [64 w, 64 w + 64).
  struct Place {
    int lane, warp, key_half, dim_quarter;
    // After the exchange this warp owns the scores of row half own_half() (rows 8 own_half ..)
    // and of the block's 8-key group group() (0..3).
    __device__ __forceinline__ int own_half() const { return dim_quarter >> 1; }
    __device__ __forceinline__ int group() const { return 2 * key_half + (dim_quarter & 1); }
  };
  // Lane (g = lane / 4, t = lane % 4) holds rows g and g + 8 (index hh = 0, 1).
  struct Accum {
    uint32_t q[Shape::kPanels][4];  // Q's A fragments, k-step dim_quarter of every panel
    float o[kColTiles][4];          // unnormalised P.V, columns 64 w + 8 n + 2 t (+ 1)
    float m[2];                     // running max (log2 domain, -inf = none): every warp's same
    float l[2];                     // this lane's part of the running sum over its own keys

    __device__ __forceinline__ void reset() {
#pragma unroll
      for (int n = 0; n < kColTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;
      }
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
    }
  };

  __device__ __forceinline__ static Place place(int thread) {
    const int warp = thread / 32;
    return {thread % 32, warp, warp >> 2, warp & 3};
  }

  // Q's fragments into registers, once per piece, after the loop's barrier that publishes Q.
  // Ends with a barrier: the exchange then overwrites the Q tile.
  template <class Smem>
  __device__ __forceinline__ static void begin_piece(Smem& sm, const Place& w, Accum& acc) {
    LdsmLane a_lane = ldsm_lane(smem_u32(sm.q), w.lane & 15, w.lane >> 4);
    a_lane.x ^= 2u * w.dim_quarter;  // chunk 2 dq + c of a panel: the fold of score_block
#pragma unroll
    for (int pn = 0; pn < Shape::kPanels; ++pn) {
      ptx::ldmatrix_x4(acc.q[pn], a_lane.template at<Shape::kRows>(8 * pn));
    }
    Barrier::sync();
  }

  template <class Smem>
  __device__ __forceinline__ static void process_block(Smem& sm, uint32_t tile,
                                                       const uint8_t* valid, float scale_log2,
                                                       const Place& w, Accum& acc) {
    const int g = w.lane >> 2, t = w.lane & 3;
    const int kh = w.key_half, dq = w.dim_quarter;
    // score: part[n][i] = partial S of key tile n (keys 16 kh + 8 n ..) over this dim quarter.
    float part[2][4] = {};
    {
      LdsmLane b_lane =
          ldsm_lane(tile, 16 * kh + ((w.lane >> 4) << 3) + (w.lane & 7), (w.lane >> 3) & 1);
      b_lane.x ^= 2u * dq;
#pragma unroll
      for (int pn = 0; pn < Shape::kPanels; ++pn) {
        uint32_t b[4];
        ptx::ldmatrix_x4(b, b_lane.template at<Shape::kBlockKeys>(8 * pn));
        ptx::mma_m16n8k16_bf16_f32(part[0], acc.q[pn], b[0], b[1]);
        ptx::mma_m16n8k16_bf16_f32(part[1], acc.q[pn], b[2], b[3]);
      }
    }
    // exchange: owner o of (key tile o & 1, row half o >> 1) collects the other 3 partials.
    float2* xch = reinterpret_cast<float2*>(sm.q) + kh * 4 * 4 * 32 + w.lane;
    float s[2] = {0.0f, 0.0f};
#pragma unroll
    for (int o = 0; o < 4; ++o) {
      const float2 mine = make_float2(part[o & 1][2 * (o >> 1)], part[o & 1][2 * (o >> 1) + 1]);
      if (o != dq) {
        xch[(o * 4 + dq) * 32] = mine;
      } else {
        s[0] = mine.x;
        s[1] = mine.y;
      }
    }
    ptx::named_barrier_sync(1 + kh, 4 * 32);  // the key half's 4 warps
#pragma unroll
    for (int src = 0; src < 4; ++src) {
      if (src != dq) {
        const float2 v = xch[(dq * 4 + src) * 32];
        s[0] += v.x;
        s[1] += v.y;
      }
    }
    // softmax: this lane owns row g + 8 own_half, keys 8 group + 2 t (+ 1).
    const int own_half = w.own_half();
    const int group = w.group();
    const int own_row = g + 8 * own_half;
    const int key = 8 * group + 2 * t;
#pragma unroll
    for (int i = 0; i < 2; ++i) s[i] = valid[key + i] != 0 ? s[i] * scale_log2 : -INFINITY;
    const float group_max = quad_max(fmaxf(s[0], s[1]));
    if (t == 0) sm.red_max[group * Shape::kRows + own_row] = group_max;
    Barrier::sync();
    float m_use[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = g + 8 * hh;
      float block_max = sm.red_max[row];
#pragma unroll
      for (int k = 1; k < 4; ++k) block_max = fmaxf(block_max, sm.red_max[k * Shape::kRows + row]);
      const RunningMaxStep step = advance_running_max(acc.m[hh], block_max);
      const float alpha = step.alpha;
      m_use[hh] = step.m_use;
      acc.l[hh] *= alpha;
#pragma unroll
      for (int n = 0; n < kColTiles; ++n) {
        acc.o[n][2 * hh] *= alpha;
        acc.o[n][2 * hh + 1] *= alpha;
      }
    }
    const float m_own = own_half != 0 ? m_use[1] : m_use[0];
    const float p0 = fast_exp2(s[0] - m_own), p1 = fast_exp2(s[1] - m_own);
    if (own_half != 0) {
      acc.l[1] += p0 + p1;
    } else {
      acc.l[0] += p0 + p1;
    }
    *reinterpret_cast<uint32_t*>(sm.p + tile_chunk_offset<Shape::kRows>(own_row, group) + 4 * t) =
        ptx::pack_bf16x2(p0, p1);
    Barrier::sync();  // P is complete
    // accumulate: O[:, 64 w ..] += P . V over the block's 32 keys.
    const LdsmLane a_lane = ldsm_lane(smem_u32(sm.p), w.lane & 15, w.lane >> 4);
    const uint32_t columns = tile + static_cast<uint32_t>(w.warp * Shape::kBlockKeys * 128);
#pragma unroll
    for (int kk = 0; kk < Shape::kBlockKeys / 16; ++kk) {
      uint32_t a[4];
      ptx::ldmatrix_x4(a, a_lane.template at<Shape::kRows>(2 * kk));
      const LdsmLane b_lane =
          ldsm_lane(columns, kk * 16 + ((w.lane >> 3) & 1) * 8 + (w.lane & 7), w.lane >> 4);
#pragma unroll
      for (int np = 0; np < kColTiles / 2; ++np) {
        uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, b_lane.template at<Shape::kBlockKeys>(2 * np));
        ptx::mma_m16n8k16_bf16_f32(acc.o[2 * np], a, b[0], b[1]);
        ptx::mma_m16n8k16_bf16_f32(acc.o[2 * np + 1], a, b[2], b[3]);
      }
    }
  }

  // Row sums over the 4 owners of each row, then each warp stores its 64 columns of the 16 rows.
  template <class Smem>
  __device__ __forceinline__ static void store(Smem& sm, const PieceTarget& to, const Place& w,
                                               const Accum& acc) {
    const int g = w.lane >> 2, t = w.lane & 3;
    const int own_half = w.own_half();
    const int group = w.group();
    const float l_own = quad_sum(own_half != 0 ? acc.l[1] : acc.l[0]);
    if (t == 0) sm.red_sum[group * Shape::kRows + g + 8 * own_half] = l_own;
    Barrier::sync();
    const int64_t h_q = to.launch->p.problem.h_q;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = g + 8 * hh;
      const int head = to.head0 + row;
      if (head >= h_q) continue;
      float l = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) l += sm.red_sum[k * Shape::kRows + row];
      const float scale = finish_row(to, head, acc.m[hh], l, w.warp == 0 && t == 0);
      store_row(to, head, 64 * w.warp + 2 * t, acc.o, 2 * hh, scale);
    }
  }
};

}  // namespace sparse_mla::cuda::portable_decode
