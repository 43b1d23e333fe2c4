// The per-warp math of one block of Shape::kBlockKeys (64 or 32) keys, shared by the portable
// prefill and decode kernels:
//   score      S = Q K^T for the warp's rows x kKeysPerWarp keys (mma.sync m16n8k16, ldmatrix from
//   the
//              swizzled Q and KV tiles; warps owning one m16 x n8 tile split d_qk in pairs),
//              scaled to the log2 domain, invalid keys -> -inf;
//   softmax    row max across the 4 warps of a row group (shared memory + named barrier),
//              running max/sum update, P = exp2(S - m) to shared memory as bf16, O rescaled;
//   accumulate O += P V over the block's keys for the warp's 128 output columns
//              (V = the first 512 dims of the same KV tile, read with ldmatrix.trans);
//   finish     row sums combined across the 4 warps.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/ldmatrix.cuh"
#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/common/tile_shape.cuh"

namespace sparse_mla::cuda {

// One warp's running state. Rows of m16 tile mt held by this lane: r0 = g, r1 = g + 8
// (g = lane / 4); columns 8n + 2t, 8n + 2t + 1 (t = lane % 4) of the warp's 128.
template <class Shape>
struct WarpAccum {
  float o[Shape::kMTiles][Shape::kColTiles][4];  // fp32, unnormalised P.V
  float m[Shape::kMTiles][2];                    // running max, log2 domain, -inf = none yet
  float l[Shape::kMTiles][2];                    // this lane's part of the running sum

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < Shape::kColTiles; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[mt][n][i] = 0.0f;
      }
      m[mt][0] = m[mt][1] = -INFINITY;
      l[mt][0] = l[mt][1] = 0.0f;
    }
  }
};

// Where a warp works: rows [row0, row0 + 16*kMTiles), keys [key0, key0 + kKeysPerWarp) of a block,
// output columns [col0, col0 + 128).
struct WarpPlace {
  int lane, row_group, key_group, row0, key0, col0;
};

template <class Shape>
__device__ __forceinline__ WarpPlace warp_place(int thread) {
  WarpPlace w;
  const int warp = thread / 32;
  w.lane = thread % 32;
  w.row_group = warp / Shape::kKeyGroups;
  w.key_group = warp % Shape::kKeyGroups;
  w.row0 = w.row_group * Shape::kMTiles * 16;
  w.key0 = w.key_group * Shape::kKeysPerWarp;
  w.col0 = w.key_group * Shape::kColsPerWarp;
  return w;
}

// ldmatrix lane address inside a swizzled [rows][64-dim panels] tile for an even chunk c8:
// base = tile + row * 128, x = (lane's chunk bit) ^ (row % 8).
struct LdsmLane {
  uint32_t base, x;
  template <int kRows>
  __device__ __forceinline__ uint32_t at(int c8) const {
    return base + (c8 >> 3) * (kRows * 128) + ((static_cast<uint32_t>(c8 & 7) ^ x) << 4);
  }
};

__device__ __forceinline__ LdsmLane ldsm_lane(uint32_t tile, int row, int chunk_bit) {
  return {tile + static_cast<uint32_t>(row) * 128, static_cast<uint32_t>(chunk_bit ^ (row & 7))};
}

// Score registers of one warp: [m16 tile][n8 key tile][4] fp32.
template <class Shape>
using ScoreTile = float[Shape::kMTiles][Shape::kKeyTiles][4];

// Split-dims score for warps that own one m16 x n8 score tile (16 rows per row group, 32-key
// blocks: the 16 x 32 and 32 x 32 tiles): the two warps of a pair (key groups 2j, 2j + 1) both
// score keys [16j, 16j + 16), each over one half of every 64-dim panel (dims 0-31 / 32-63 of
// it), and swap the halves of the sum they do not own through the dead P tile. Per warp and
// block this reads half of Q's fragments (the 4 warps re-read all of Q every block otherwise: 37 %
// of the shared-memory bytes of the 4-warp 16 x 32 decode tile of 2c5e7f3) and the same K bytes,
// for 4 KB of exchange traffic per row group. The owned keys are today's (8 key_group ..), so
// softmax and P.V do not change.
template <class Shape>
inline constexpr bool kSplitDimsScore =
    Shape::kMTiles == 1 && Shape::kKeyTiles == 1 && Shape::kKeyGroups == 4;

// score: s[mt][nt] = Q[rows of mt] . K[key0 + 8 nt .. +8]^T over all d_qk dims (raw dot).
// B fragments: ldmatrix x4 = 2 key tiles x k16 (16 keys per warp), x2 = 1 key tile (8 keys).
// p_scratch: the P tile, used by the split-dims form only. Caller contract: a barrier of the
// row group (or the CTA) between the previous block's accumulate_block and this call (both
// kernels' loop-top __syncthreads), so P is dead here; softmax_block writes P only after its
// row-group barrier, which every warp reaches after reading its partner's slot.
template <class Shape>
__device__ __forceinline__ void score_block(uint32_t q_tile, uint32_t kv_tile, const WarpPlace& w,
                                            ScoreTile<Shape>& s, float* p_scratch) {
  if constexpr (kSplitDimsScore<Shape>) {
    // 4 warps x 32 lanes x 4 fp32 slots = exactly the row group's 16 rows of P (16 x 128 B), so
    // no slot overlaps another row group's P.
    static_assert(4 * 32 * 4 * sizeof(float) == 16 * 128 &&
                  Shape::kRowGroups * 16 * 128 == Shape::kPBytes);
    const int pair = w.key_group >> 1, dims_half = w.key_group & 1;
    float part[2][4] = {};  // [key tile: keys 16 pair + 8 n ..][fragment]
    // Half h takes k-steps 2h, 2h + 1 of every panel (chunks 4h .. 4h + 3). Chunk 4h + c of a
    // swizzled row is (4h + c) ^ x = c ^ (x ^ 4h): folding 4h into the lane's swizzle term keeps
    // every address a per-lane base plus a compile-time offset (a fully unrolled loop; indexing
    // k-steps h * kSteps / 2 + k instead put ~20 integer instructions per iteration into a
    // rolled loop and spilled 4 B in v32fp8_h16_k32).
    LdsmLane a_lane = ldsm_lane(q_tile, w.row0 + (w.lane & 15), w.lane >> 4);
    LdsmLane b_lane =
        ldsm_lane(kv_tile, 16 * pair + ((w.lane >> 4) << 3) + (w.lane & 7), (w.lane >> 3) & 1);
    a_lane.x ^= 4u * dims_half;
    b_lane.x ^= 4u * dims_half;
#pragma unroll
    for (int k = 0; k < 2 * Shape::kPanels; ++k) {
      const int c8 = 8 * (k >> 1) + 2 * (k & 1);
      uint32_t a[4], b[4];
      ptx::ldmatrix_x4(a, a_lane.template at<Shape::kRows>(c8));
      ptx::ldmatrix_x4(b, b_lane.template at<Shape::kBlockKeys>(c8));
      ptx::mma_m16n8k16_bf16_f32(part[0], a, b[0], b[1]);
      ptx::mma_m16n8k16_bf16_f32(part[1], a, b[2], b[3]);
    }
    // This warp owns key tile dims_half (keys 8 key_group ..); its partner owns the other.
    float* mine = p_scratch + (4 * w.row_group + w.key_group) * 128 + w.lane;
    const float* partners = p_scratch + (4 * w.row_group + (w.key_group ^ 1)) * 128 + w.lane;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool low = dims_half == 0;
      mine[32 * i] = low ? part[1][i] : part[0][i];
      s[0][0][i] = low ? part[0][i] : part[1][i];
    }
    // ids 3-6; softmax_block and finish_rows use 1-2
    ptx::named_barrier_sync(3 + 2 * w.row_group + pair, 64);
#pragma unroll
    for (int i = 0; i < 4; ++i) s[0][0][i] += partners[32 * i];
  } else {
    LdsmLane a_lane[Shape::kMTiles];
#pragma unroll
    for (int mt = 0; mt < Shape::kMTiles; ++mt) {
      a_lane[mt] = ldsm_lane(q_tile, w.row0 + mt * 16 + (w.lane & 15), w.lane >> 4);
#pragma unroll
      for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.0f;
      }
    }
    // x2 uses the addresses of lanes 0..15 only (keys key0..key0+7, both k halves).
    const LdsmLane b_lane = ldsm_lane(
        kv_tile, w.key0 + (Shape::kKeyTiles == 2 ? ((w.lane >> 4) << 3) : 0) + (w.lane & 7),
        (w.lane >> 3) & 1);
#pragma unroll
    for (int ks = 0; ks < Shape::kDqk / 16; ++ks) {
      uint32_t a[Shape::kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < Shape::kMTiles; ++mt) {
        ptx::ldmatrix_x4(a[mt], a_lane[mt].template at<Shape::kRows>(2 * ks));
      }
      uint32_t b[4];
      if constexpr (Shape::kKeyTiles == 2) {
        ptx::ldmatrix_x4(b, b_lane.template at<Shape::kBlockKeys>(2 * ks));
      } else {
        ptx::ldmatrix_x2(b[0], b[1], b_lane.template at<Shape::kBlockKeys>(2 * ks));
      }
#pragma unroll
      for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
          ptx::mma_m16n8k16_bf16_f32(s[mt][nt], a[mt], b[2 * nt], b[2 * nt + 1]);
        }
      }
    }
  }
}

// softmax: masks and scales s in place, updates acc.m/acc.l, rescales acc.o, writes bf16 P into
// p_tile ([kRows][64] swizzled, the first kBlockKeys columns used). red_max: [kKeyGroups][kRows]
// fp32 scratch. valid: [kBlockKeys] flags of this block. Ends with the row group's barrier,
// after which P is complete.
template <class Shape>
__device__ __forceinline__ void softmax_block(ScoreTile<Shape>& s, const uint8_t* valid,
                                              float scale_log2, float* red_max, uint8_t* p_tile,
                                              const WarpPlace& w, WarpAccum<Shape>& acc) {
  const int g = w.lane >> 2, t = w.lane & 3;
  const int barrier_id = 1 + w.row_group;
  const int barrier_threads = Shape::kKeyGroups * 32;
  bool key_ok[Shape::kKeyTiles][2];
#pragma unroll
  for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) key_ok[nt][i] = valid[w.key0 + nt * 8 + 2 * t + i] != 0;
  }
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float row_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float& x = s[mt][nt][2 * half + i];
          x = key_ok[nt][i] ? x * scale_log2 : -INFINITY;
          row_max = fmaxf(row_max, x);
        }
      }
      row_max = quad_max(row_max);
      if (t == 0) red_max[w.key_group * Shape::kRows + w.row0 + mt * 16 + half * 8 + g] = row_max;
    }
  }
  ptx::named_barrier_sync(barrier_id, barrier_threads);
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = w.row0 + mt * 16 + half * 8 + g;
      float block_max = red_max[row];
#pragma unroll
      for (int k = 1; k < Shape::kKeyGroups; ++k) {
        block_max = fmaxf(block_max, red_max[k * Shape::kRows + row]);
      }
      const auto [m_use, alpha] = advance_running_max(acc.m[mt][half], block_max);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float& x = s[mt][nt][2 * half + i];
          x = fast_exp2(x - m_use);
          sum += x;
        }
      }
      acc.l[mt][half] = acc.l[mt][half] * alpha + sum;
      // Always rescaled: skipping it when a warp's alpha is 1 (a vote per row half) measured
      // 0.6 % slower overall on the H200 (prefill 16 rows 2.5 %, decode 128 heads 1.3 %).
#pragma unroll
      for (int n = 0; n < Shape::kColTiles; ++n) {
        acc.o[mt][n][2 * half] *= alpha;
        acc.o[mt][n][2 * half + 1] *= alpha;
      }
#pragma unroll
      for (int nt = 0; nt < Shape::kKeyTiles; ++nt) {
        const uint32_t packed = ptx::pack_bf16x2(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
        const int chunk = (w.key0 >> 3) + nt;
        *reinterpret_cast<uint32_t*>(p_tile + tile_chunk_offset<Shape::kRows>(row, chunk) + 4 * t) =
            packed;
      }
    }
  }
  ptx::named_barrier_sync(barrier_id, barrier_threads);
}

// accumulate: acc.o += P[rows, kBlockKeys keys] . V[kBlockKeys keys, col0 .. col0 + 128).
template <class Shape>
__device__ __forceinline__ void accumulate_block(uint32_t p_tile, uint32_t kv_tile,
                                                 const WarpPlace& w, WarpAccum<Shape>& acc) {
  LdsmLane a_lane[Shape::kMTiles];
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt) {
    a_lane[mt] = ldsm_lane(p_tile, w.row0 + mt * 16 + (w.lane & 15), w.lane >> 4);
  }
#pragma unroll
  for (int kk = 0; kk < Shape::kBlockKeys / 16; ++kk) {
    uint32_t a[Shape::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Shape::kMTiles; ++mt) {
      ptx::ldmatrix_x4(a[mt], a_lane[mt].template at<Shape::kRows>(2 * kk));
    }
    const LdsmLane b_lane =
        ldsm_lane(kv_tile, kk * 16 + ((w.lane >> 3) & 1) * 8 + (w.lane & 7), w.lane >> 4);
#pragma unroll
    for (int np = 0; np < Shape::kColTiles / 2; ++np) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, b_lane.template at<Shape::kBlockKeys>((w.col0 >> 3) + 2 * np));
#pragma unroll
      for (int mt = 0; mt < Shape::kMTiles; ++mt) {
        ptx::mma_m16n8k16_bf16_f32(acc.o[mt][2 * np], a[mt], b[0], b[1]);
        ptx::mma_m16n8k16_bf16_f32(acc.o[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// finish: the full row sums (over the 4 warps of the row group) of this lane's rows.
// red_sum: [kKeyGroups][kRows] fp32 scratch.
template <class Shape>
__device__ __forceinline__ void finish_rows(const WarpAccum<Shape>& acc, float* red_sum,
                                            const WarpPlace& w,
                                            float (&l_total)[Shape::kMTiles][2]) {
  const int g = w.lane >> 2, t = w.lane & 3;
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = quad_sum(acc.l[mt][half]);
      if (t == 0) red_sum[w.key_group * Shape::kRows + w.row0 + mt * 16 + half * 8 + g] = l;
    }
  }
  ptx::named_barrier_sync(1 + w.row_group, Shape::kKeyGroups * 32);
#pragma unroll
  for (int mt = 0; mt < Shape::kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = w.row0 + mt * 16 + half * 8 + g;
      float l = 0.0f;
#pragma unroll
      for (int k = 0; k < Shape::kKeyGroups; ++k) l += red_sum[k * Shape::kRows + row];
      l_total[mt][half] = l;
    }
  }
}

}  // namespace sparse_mla::cuda
