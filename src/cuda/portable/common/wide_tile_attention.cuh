// The per-warp math of the 64-row x 64-key CTA tile, shared by the portable prefill
// (sparse_prefill/config.cuh WideShape) and decode (sparse_decode/mma_core.cuh) kernels, on one
// 64-key block (8 warps; Shape needs kRows = 64, kBlockKeys = 64, kPanels = d_qk / 64):
//   score     partial S = Q K^T of the warp's 32x32 tile over its half of d_qk;
//   exchange  the two halves of a tile meet through shared memory: warp g keeps m16 tile g;
//   softmax   row max over the 2 key halves (shared memory + __syncthreads), running max/sum,
//             P = exp2(S - m) to shared memory as bf16, the rows' rescale factors to alpha[];
//   accumulate O[64 rows, 64 columns] = O * alpha + P V (V = the first 512 dims of the tile);
// (The finish — row sums over the key halves, output scales, stores — is each kernel's own.)
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/ldmatrix.cuh"
#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/common/tile_attention.cuh"

namespace sparse_mla::cuda {

// Where warp `warp` works (see sparse_prefill/config.cuh, WideShape): d_qk half g, row half rh,
// key half kh; after the exchange it owns score rows [own_row0, +16); in P.V it owns output
// columns [col0, +64).
struct WidePlace {
  int lane, g, rh, kh, own_row0, col0;
};

__device__ __forceinline__ WidePlace wide_place(int thread) {
  const int warp = thread / 32;
  WidePlace w;
  w.lane = thread % 32;
  w.g = warp >> 2;
  w.rh = (warp >> 1) & 1;
  w.kh = warp & 1;
  w.own_row0 = 32 * w.rh + 16 * w.g;
  w.col0 = 64 * warp;
  return w;
}

// Running state. o: rows 16 mt + (lane/4, +8), columns col0 + 8n + 2(lane%4) + {0,1}; m, l: the
// owned score rows own_row0 + lane/4 (+8), l holding this lane's part of the sum.
template <class Shape>
struct WideAccum {
  float o[4][8][4];
  float m[2];
  float l[2];

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[mt][n][i] = 0.0f;
      }
    }
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }
};

// This lane's part of the warp's output tile, row by row: f(row, col, o, i0) for rows
// 16 mt + 8 half + lane/4 (mt < 4, half < 2), whose values are o[n][i0], o[n][i0 + 1] at columns
// col + 8n, col + 8n + 1 (n < 8; o = acc.o[mt], i0 = 2 half, col = col0 + 2 (lane % 4)).
template <class Shape, class F>
__device__ __forceinline__ void wide_for_each_row(const WideAccum<Shape>& acc, const WidePlace& w,
                                                  F&& f) {
  const int col = w.col0 + 2 * (w.lane & 3);
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      f(16 * mt + 8 * half + (w.lane >> 2), col, acc.o[mt], 2 * half);
    }
  }
}

// score: s[mt][nt] = Q[32 rh + 16 mt ..] . K[32 kh + 8 nt ..]^T over k-steps 2g, 2g+1 of every
// panel (chunks 4g .. 4g+3), raw partial dot products. each_step(i) runs before k-step i of the
// warp's 2 * kPanels (the prefill issues one cp.async of the next block there, see
// wide_kernel.cuh).
struct NoStepHook {
  __device__ __forceinline__ void operator()(int) const {}
};

template <class Shape, class StepHook = NoStepHook>
__device__ __forceinline__ void wide_score(uint32_t q_tile, uint32_t kv_tile, const WidePlace& w,
                                           float (&s)[2][4][4], StepHook&& each_step = {}) {
  LdsmLane a_lane[2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    a_lane[mt] = ldsm_lane(q_tile, 32 * w.rh + 16 * mt + (w.lane & 15), w.lane >> 4);
    a_lane[mt].x ^= 4 * w.g;  // chunk 4g + c == c ^ 4g for c < 4
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.0f;
    }
  }
  LdsmLane b_lane =
      ldsm_lane(kv_tile, 32 * w.kh + ((w.lane >> 4) << 3) + (w.lane & 7), (w.lane >> 3) & 1);
  b_lane.x ^= 4 * w.g;
#pragma unroll
  for (int panel = 0; panel < Shape::kPanels; ++panel) {
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      each_step(2 * panel + step);
      const int c8 = panel * 8 + 2 * step;
      uint32_t a[2][4], b[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        ptx::ldmatrix_x4(a[mt], a_lane[mt].template at<Shape::kRows>(c8));
      }
#pragma unroll
      for (int kp = 0; kp < 2; ++kp) {  // keys 16 kp .. 16 kp + 15 of the warp's 32: +16 rows
        ptx::ldmatrix_x4(b[kp], b_lane.template at<Shape::kBlockKeys>(c8) + kp * 16 * 128);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int kp = 0; kp < 2; ++kp) {
          ptx::mma_m16n8k16_bf16_f32(s[mt][2 * kp], a[mt], b[kp][0], b[kp][1]);
          ptx::mma_m16n8k16_bf16_f32(s[mt][2 * kp + 1], a[mt], b[kp][2], b[kp][3]);
        }
      }
    }
  }
}

// exchange: adds the partner's half of d_qk into m16 tile g; own[nt][i] = the full scores of the
// owned rows. scratch: 4 slots (one per (rh, kh) pair) x [16 values][32 lanes] fp32, each lane
// reading back only what it wrote, so the slot needs no barrier between warp 1's read and write.
// Barrier ids 1..8, a full barrier by both warps (an arrive hand-off would not wait less, since
// each warp needs the other's half, and compute-sanitizer racecheck flagged it as a race):
// warp 0 writes its half; warp 1 reads, writes its own half; warp 0 reads.
// The two warps reach each barrier from different instructions (the two sides of the g branch),
// so the barriers are barrier.sync without .aligned: with bar.sync (.aligned, undefined there by
// PTX) compute-sanitizer synccheck reported "divergent thread(s) in block" and aborted the kernel.
// Measured (e76e83d, H200, benchmarks/results/ab-exchange-unaligned-barrier-2026-11-30): prefill
// +0.0-0.9 %, decode +0.4-1.9 %; moving one bar.sync of each id out of the branches instead cost
// prefill +1.5-2.6 % (exp-exchange-same-pc-barriers-2026-11-30).
__device__ __forceinline__ void wide_exchange(float (&s)[2][4][4], float* scratch,
                                              const WidePlace& w, float (&own)[4][4]) {
  const int slot = 2 * w.rh + w.kh;
  float* x = scratch + slot * 512 + w.lane;
  const int sent = 1 + slot, returned = 5 + slot;
  if (w.g == 0) {
#pragma unroll
    for (int e = 0; e < 16; ++e) x[32 * e] = s[1][e / 4][e % 4];
    ptx::named_barrier_sync_unaligned(sent, 64);
    ptx::named_barrier_sync_unaligned(returned, 64);
#pragma unroll
    for (int e = 0; e < 16; ++e) own[e / 4][e % 4] = s[0][e / 4][e % 4] + x[32 * e];
  } else {
    ptx::named_barrier_sync_unaligned(sent, 64);
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      own[e / 4][e % 4] = s[1][e / 4][e % 4] + x[32 * e];
      x[32 * e] = s[0][e / 4][e % 4];
    }
    ptx::named_barrier_sync_unaligned(returned, 64);
  }
}

// softmax on the owned 16 rows x 32 keys: masks invalid keys, updates acc.m/acc.l, writes bf16 P
// into p_tile and the rows' rescale factors into alpha[]. Two __syncthreads: row maxima of both
// key halves present; P and alpha complete (also: every exchange read done before P is written).
template <class Shape>
__device__ __forceinline__ void wide_softmax(float (&own)[4][4], const uint8_t* valid,
                                             float scale_log2, float (&red)[2][Shape::kRows],
                                             float* alpha, uint8_t* p_tile, const WidePlace& w,
                                             WideAccum<Shape>& acc) {
  const int gq = w.lane >> 2, t = w.lane & 3;
  bool key_ok[4][2];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) key_ok[nt][i] = valid[32 * w.kh + 8 * nt + 2 * t + i] != 0;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float row_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float& v = own[nt][2 * half + i];
        v = key_ok[nt][i] ? v * scale_log2 : -INFINITY;
        row_max = fmaxf(row_max, v);
      }
    }
    row_max = quad_max(row_max);
    if (t == 0) red[w.kh][w.own_row0 + 8 * half + gq] = row_max;
  }
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = w.own_row0 + 8 * half + gq;
    const auto [m_use, a] = advance_running_max(acc.m[half], fmaxf(red[0][row], red[1][row]));
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float& v = own[nt][2 * half + i];
        v = fast_exp2(v - m_use);
        sum += v;
      }
    }
    acc.l[half] = acc.l[half] * a + sum;
    if (w.kh == 0 && t == 0) alpha[row] = a;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const uint32_t packed = ptx::pack_bf16x2(own[nt][2 * half], own[nt][2 * half + 1]);
      *reinterpret_cast<uint32_t*>(p_tile + tile_chunk_offset<Shape::kRows>(row, 4 * w.kh + nt) +
                                   4 * t) = packed;
    }
  }
  __syncthreads();
}

// accumulate: O[64 rows, col0 .. col0 + 64) = O * alpha[row] + P[64 rows, 64 keys] . V.
template <class Shape>
__device__ __forceinline__ void wide_accumulate(uint32_t p_tile, uint32_t kv_tile,
                                                const float* alpha, const WidePlace& w,
                                                WideAccum<Shape>& acc) {
  const int gq = w.lane >> 2;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float a = alpha[16 * mt + 8 * half + gq];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        acc.o[mt][n][2 * half] *= a;
        acc.o[mt][n][2 * half + 1] *= a;
      }
    }
  }
  LdsmLane a_lane[4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    a_lane[mt] = ldsm_lane(p_tile, 16 * mt + (w.lane & 15), w.lane >> 4);
  }
#pragma unroll
  for (int kk = 0; kk < Shape::kBlockKeys / 16; ++kk) {
    uint32_t a[4][4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      ptx::ldmatrix_x4(a[mt], a_lane[mt].template at<Shape::kRows>(2 * kk));
    }
    const LdsmLane b_lane =
        ldsm_lane(kv_tile, kk * 16 + ((w.lane >> 3) & 1) * 8 + (w.lane & 7), w.lane >> 4);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, b_lane.template at<Shape::kBlockKeys>((w.col0 >> 3) + 2 * np));
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        ptx::mma_m16n8k16_bf16_f32(acc.o[mt][2 * np], a[mt], b[0], b[1]);
        ptx::mma_m16n8k16_bf16_f32(acc.o[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

}  // namespace sparse_mla::cuda
