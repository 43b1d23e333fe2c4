// The consumer warpgroups of the heads-in-N Hopper kernels (heads_in_n/config.cuh): per block,
// S^T = K Q^T, the column (head) softmax over the block's 64 keys, O^T += V^T P^T; per work item
// (a prefill token), the merge of the two warpgroups' partial states and the
// staged bf16 store the kernels' own stores use. Accumulator layout (m64nN, wgmma.cuh): thread
// (warp w, lane l) of a warpgroup holds d[i] at row 16 w + l / 4 + 8 ((i >> 1) & 1) and column
// 8 (i >> 2) + 2 (l % 4) + (i & 1): rows are keys (S^T) or dims (O^T), columns heads.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cluster.cuh"  // mbarrier wait and arrive
#include "cuda/device/ptx/mma.cuh"      // pack_bf16x2
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/ptx/wgmma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/heads_in_n/config.cuh"
#include "cuda/sm90a/seesaw/consumers.cuh"  // kFirstScoreHalf

namespace sparse_mla::cuda::sm90a {

// A consumer thread's place: warpgroup wg (0, 1; it takes ring stage wg), warp, lane; its two
// rows (keys of S^T, dims of O^T within a 64-dim panel) and its kColumns heads.
struct ColumnPlace {
  int wg, warp, lane;
  int row[2];  // accumulator i holds row[(i >> 1) & 1]
  // wg through a shuffle, as ConsumerPlace does: warp-uniform, descriptors in uniform registers.
  __device__ __forceinline__ explicit ColumnPlace(int t)
      : wg(__shfl_sync(0xffffffffu, t >> 7, 0)), warp((t >> 5) & 3), lane(t & 31) {
    row[0] = 16 * warp + (lane >> 2);
    row[1] = row[0] + 8;
  }
  // Column j (j < kColumns) is accumulator i's with j = 2 (i >> 2) + (i & 1).
  __device__ __forceinline__ int head(int j) const {
    return 8 * (j >> 1) + 2 * (lane & 3) + (j & 1);
  }
};

__device__ __forceinline__ constexpr int column_of(int i) { return 2 * (i >> 2) + (i & 1); }

// One arrival per warp on `barrier` (an empty half-stage, q_empty) once the warp is done with it.
__device__ __forceinline__ void arrive_per_warp(uint64_t& barrier, int lane) {
  __syncwarp();
  if (lane == 0) ptx::mbarrier_arrive(smem_u32(&barrier));
}

template <int kN, int kTransA>
__device__ __forceinline__ void wgmma_n(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                        bool accumulate) {
  if constexpr (kN == 16) {
    ptx::wgmma_m64n16k16_ss<kTransA>(d, desc_a, desc_b, accumulate);
  } else {
    ptx::wgmma_m64n32k16_ss<kTransA>(d, desc_a, desc_b, accumulate);
  }
}

// S^T (+)= K Q^T over the k-steps of panels [kFirst, kEnd): A = the stage tile (64 keys, K-major,
// panels kPanelBytes apart), B = Q (kN heads, K-major, panels kN x 128 B apart).
template <int kN, int kFirst, int kEnd, bool kOverwrite>
__device__ __forceinline__ void issue_transposed_scores(uint32_t q, uint32_t kv,
                                                        float (&s)[kN / 2]) {
  const uint64_t desc_k = ptx::wgmma_desc_sw128(kv, 16, 1024);
  const uint64_t desc_q = ptx::wgmma_desc_sw128(q, 16, 1024);
#pragma unroll
  for (int step = 4 * kFirst; step < 4 * kEnd; ++step) {
    const uint32_t k_offset = ((step >> 2) * kPanelBytes + (step & 3) * 32) >> 4;
    const uint32_t q_offset = ((step >> 2) * kN * 128 + (step & 3) * 32) >> 4;
    wgmma_n<kN, 0>(s, desc_k + k_offset, desc_q + q_offset, !kOverwrite || step > 4 * kFirst);
  }
}

// One half of stage kStage's scores once it has landed.
template <int kDqk, int kN, int kStage, int kHalf, bool kOverwrite, class SmemT>
__device__ __forceinline__ void issue_transposed_score_half(uint32_t q, SmemT& sm, uint32_t parity,
                                                            float (&s)[kN / 2]) {
  const uint32_t kv = smem_u32(sm.kv[kStage]);
  ptx::mbarrier_wait_parity(smem_u32(&sm.full[2 * kStage + kHalf]), parity);
  if constexpr (kHalf == 0) {
    issue_transposed_scores<kN, 0, kLeftPanels, kOverwrite>(q, kv, s);
  } else {
    issue_transposed_scores<kN, kLeftPanels, kDqk / 64, kOverwrite>(q, kv, s);
  }
}

// S^T of the warpgroup's block (stage kStage) at ring parity `parity`: the half the producer
// fills first is converted and scored first, so its MMAs run while the other half converts.
template <int kDqk, int kN, int kStage, class SmemT>
__device__ __forceinline__ void transposed_scores(uint32_t q, SmemT& sm, uint32_t parity,
                                                  float (&s)[kN / 2]) {
  constexpr int kFirst = kFirstScoreHalf<kStage>;
  ptx::wgmma_fence_operands(s);
  ptx::wgmma_fence();
  issue_transposed_score_half<kDqk, kN, kStage, kFirst, true>(q, sm, parity, s);
  issue_transposed_score_half<kDqk, kN, kStage, 1 - kFirst, false>(q, sm, parity, s);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operands(s);
}

// A warpgroup's state over its blocks of a work item: per column (head), the running max m (log2,
// lazy as the seesaw's), the thread's share l of the sums over its rows, and the true max of the
// scores (log2; max_logits).
template <int kN>
struct ColumnState {
  float m[HeadsInN<kN>::kColumns];
  float l[HeadsInN<kN>::kColumns];
  float max[HeadsInN<kN>::kColumns];
  __device__ __forceinline__ ColumnState() {
#pragma unroll
    for (int j = 0; j < HeadsInN<kN>::kColumns; ++j) {
      m[j] = -INFINITY;
      l[j] = 0.0f;
      max[j] = -INFINITY;
    }
  }
};

// Scores to the log2 domain with invalid keys at -inf, and the block's max per column over its 64
// keys: the thread's two rows, the warp's 16 (lanes l, l ^ 4, l ^ 8, l ^ 16 share columns), then
// the warpgroup's four warps through column_max[kWg] and a barrier of the warpgroup (the next
// block's writes come after the P^T barrier, which every read here precedes).
template <int kN, int kWg, class SmemT>
__device__ __forceinline__ void column_maxima(SmemT& sm, const uint8_t* valid,
                                              const ColumnPlace& at, float scale_log2,
                                              float (&s)[kN / 2],
                                              float (&mx)[HeadsInN<kN>::kColumns]) {
  constexpr int kColumns = HeadsInN<kN>::kColumns;
  const bool ok[2] = {valid[at.row[0]] != 0, valid[at.row[1]] != 0};
#pragma unroll
  for (int j = 0; j < kColumns; ++j) mx[j] = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    s[i] = ok[(i >> 1) & 1] ? s[i] * scale_log2 : -INFINITY;
    mx[column_of(i)] = fmaxf(mx[column_of(i)], s[i]);
  }
  float(&warp_max)[4][kN] = sm.column_max[kWg];
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 4));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 8));
    mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], 16));
    if (at.lane < 4) warp_max[at.warp][at.head(j)] = mx[j];
  }
  ptx::named_barrier_sync(kColumnBarrier + kWg, kWarpgroupThreads);
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    const int h = at.head(j);
    mx[j] = fmaxf(fmaxf(warp_max[0][h], warp_max[1][h]), fmaxf(warp_max[2][h], warp_max[3][h]));
  }
}

// Byte offset of element (head, key) in a swizzled [kN heads][64 keys] P^T tile.
__device__ __forceinline__ uint32_t pt_offset(int head, int key) {
  return head * 128 + ((((key >> 3) ^ (head & 7))) << 4) + (key & 7) * 2;
}

// P^T = 2^(S^T - m_use) into the warpgroup's P^T tile (bf16), added to the sums; then the async
// proxy fence and the warpgroup's barrier, after which its products may read the tile.
template <int kN, int kWg>
__device__ __forceinline__ void store_transposed_p(uint8_t* pt, const ColumnPlace& at,
                                                   const float (&s)[kN / 2],
                                                   const float (&m_use)[HeadsInN<kN>::kColumns],
                                                   ColumnState<kN>& st) {
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    const int j = column_of(i);
    const float p = fast_exp2(s[i] - m_use[j]);
    st.l[j] += p;
    *reinterpret_cast<uint16_t*>(pt + pt_offset(at.head(j), at.row[(i >> 1) & 1])) =
        static_cast<uint16_t>(ptx::pack_bf16x2(p, 0.0f));
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(kColumnBarrier + kWg, kWarpgroupThreads);
}

// O^T[panels [kFirst, kEnd)] += V^T P^T: A = the stage tile's panel (64 dims x 16 keys per k-step,
// read MN-major: the transpose of [keys][dims]), B = the P^T tile (K-major).
template <int kN, int kFirst, int kEnd>
__device__ __forceinline__ void issue_transposed_products(uint32_t kv, uint32_t pt,
                                                          float (&o)[kValuePanels][kN / 2]) {
  const uint64_t desc_p = ptx::wgmma_desc_sw128(pt, 16, 1024);
#pragma unroll
  for (int panel = kFirst; panel < kEnd; ++panel) {
    const uint64_t desc_v = ptx::wgmma_desc_sw128(kv + panel * kPanelBytes, kPanelBytes, 1024);
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      wgmma_n<kN, 1>(o[panel], desc_v + ((16 * step * 128) >> 4), desc_p + ((32 * step) >> 4),
                     true);
    }
  }
}

// Orders the compiler's accesses of O^T's panels [kFirst, kEnd) against the async MMAs.
template <int kN, int kFirst = 0, int kEnd = kValuePanels>
__device__ __forceinline__ void fence_outputs(float (&o)[kValuePanels][kN / 2]) {
#pragma unroll
  for (int panel = kFirst; panel < kEnd; ++panel) ptx::wgmma_fence_operands(o[panel]);
}

// One block of the warpgroup (stage kStage of ring pair `ring_pair`): scores, column softmax,
// products; each half-stage is freed once the products that read it are done, the half the
// producer refills first (kFirstScoreHalf) first. last: the item's last block (its scores free Q).
template <int kDqk, int kN, int kStage, class SmemT>
__device__ __forceinline__ void consume_block(uint32_t q, SmemT& sm, const ColumnPlace& at,
                                              float scale_log2, uint32_t ring_pair, bool last,
                                              ColumnState<kN>& st,
                                              float (&o)[kValuePanels][kN / 2]) {
  constexpr int kColumns = HeadsInN<kN>::kColumns;
  constexpr int kFirst = kFirstScoreHalf<kStage>;
  float s[kN / 2];
  transposed_scores<kDqk, kN, kStage>(q, sm, ring_pair & 1, s);
  if (last) arrive_per_warp(sm.q_empty, at.lane);
  float mx[kColumns], m_use[kColumns], alpha[kColumns];
  column_maxima<kN, kStage>(sm, sm.valid[kStage], at, scale_log2, s, mx);
  bool rescale = false;
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    st.max[j] = fmaxf(st.max[j], mx[j]);
    const RunningMaxStep step = advance_running_max_lazy(st.m[j], mx[j]);
    m_use[j] = step.m_use;
    alpha[j] = step.alpha;
    st.l[j] *= alpha[j];
    rescale |= alpha[j] != 1.0f;
  }
  if (rescale) {
#pragma unroll
    for (int panel = 0; panel < kValuePanels; ++panel) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) o[panel][i] *= alpha[column_of(i)];
    }
  }
  uint8_t* pt = sm.pt[kStage];  // WG kStage's
  store_transposed_p<kN, kStage>(pt, at, s, m_use, st);
  const uint32_t kv = smem_u32(sm.kv[kStage]);
  fence_outputs<kN>(o);
  ptx::wgmma_fence();
  // Left half = panels 0-3 (dims 0-255), right half = panels 4-7 of V (the RoPE panel at d_qk 576
  // is read by the scores only).
  constexpr int kFirstBegin = kFirst == 0 ? 0 : kLeftPanels;
  constexpr int kSecondBegin = kLeftPanels - kFirstBegin;
  issue_transposed_products<kN, kFirstBegin, kFirstBegin + kLeftPanels>(kv, smem_u32(pt), o);
  ptx::wgmma_commit_group();
  issue_transposed_products<kN, kSecondBegin, kSecondBegin + kLeftPanels>(kv, smem_u32(pt), o);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<1>();
  fence_outputs<kN, kFirstBegin, kFirstBegin + kLeftPanels>(o);
  arrive_per_warp(sm.empty[2 * kStage + kFirst], at.lane);
  ptx::wgmma_wait_group<0>();
  fence_outputs<kN>(o);
  arrive_per_warp(sm.empty[2 * kStage + 1 - kFirst], at.lane);
}

// One work item's blocks (num_pairs >= 0, from the CTA's ring pair `ring_pairs` on; its Q at phase
// `item_count` of q_full): o and st start from zero, each of the warpgroup's blocks runs through
// consume_block, and an item without pairs frees Q as soon as it has landed.
template <int kDqk, int kN, class SmemT>
__device__ __forceinline__ void consume_item_blocks(uint32_t q, SmemT& sm, const ColumnPlace& at,
                                                    float scale_log2, int num_pairs,
                                                    uint32_t ring_pairs, uint32_t item_count,
                                                    ColumnState<kN>& st,
                                                    float (&o)[kValuePanels][kN / 2]) {
#pragma unroll
  for (int panel = 0; panel < kValuePanels; ++panel) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[panel][i] = 0.0f;
  }
  st = ColumnState<kN>();
  ptx::mbarrier_wait_parity(smem_u32(&sm.q_full), item_count & 1);
  for (int pair = 0; pair < num_pairs; ++pair) {
    const bool last = pair + 1 == num_pairs;
    if (at.wg == 0) {
      consume_block<kDqk, kN, 0>(q, sm, at, scale_log2, ring_pairs + pair, last, st, o);
    } else {
      consume_block<kDqk, kN, 1>(q, sm, at, scale_log2, ring_pairs + pair, last, st, o);
    }
  }
  if (num_pairs == 0) arrive_per_warp(sm.q_empty, at.lane);
}

// A work item's end: the two warpgroups' states merged per head (M = max(m0, m1); each side's
// sums and O^T scaled by 2^(m_w - M)), M and the merged sum into m and l, and the item's true
// max (both sides' st.max) into true_max. Warpgroup w keeps panels [4 w, 4 w + 4) of
// O^T (dims 256 w ..), merged with the peer's part of them (through `merge`, kMergePanels a
// round), in `keep`; o is dead on return (its registers free for the store). The next item's
// statistics barrier orders this item's reads of `merge` before its writes.
template <int kN, class SmemT>
__device__ __forceinline__ void merge_warpgroups(
    SmemT& sm, const ColumnPlace& at, ColumnState<kN>& st, float (&o)[kValuePanels][kN / 2],
    float (&keep)[kLeftPanels][kN / 2], float (&m)[HeadsInN<kN>::kColumns],
    float (&l)[HeadsInN<kN>::kColumns], float (&true_max)[HeadsInN<kN>::kColumns]) {
  constexpr int kColumns = HeadsInN<kN>::kColumns;
  constexpr int kAcc = HeadsInN<kN>::kAccRegs;
  constexpr int kPanels = HeadsInN<kN>::kMergePanels;
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    st.l[j] += __shfl_xor_sync(0xffffffffu, st.l[j], 4);
    st.l[j] += __shfl_xor_sync(0xffffffffu, st.l[j], 8);
    st.l[j] += __shfl_xor_sync(0xffffffffu, st.l[j], 16);
    if (at.lane < 4) {
      sm.column_sum[at.wg][at.warp][at.head(j)] = st.l[j];
      if (at.warp == 0) {
        sm.column_m[at.wg][at.head(j)] = st.m[j];
        sm.column_true_max[at.wg][at.head(j)] = st.max[j];
      }
    }
  }
  ptx::named_barrier_sync(kMergeBarrier, kConsumerThreads);
  float own[kColumns];
#pragma unroll
  for (int j = 0; j < kColumns; ++j) {
    const int h = at.head(j);
    const float m0 = sm.column_m[0][h], m1 = sm.column_m[1][h];
    m[j] = fmaxf(m0, m1);
    true_max[j] = fmaxf(sm.column_true_max[0][h], sm.column_true_max[1][h]);
    const float m_use = usable_max(m[j]);
    const float f0 = fast_exp2(m0 - m_use), f1 = fast_exp2(m1 - m_use);
    float l0 = 0.0f, l1 = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      l0 += sm.column_sum[0][w][h];
      l1 += sm.column_sum[1][w][h];
    }
    l[j] = l0 * f0 + l1 * f1;
    own[j] = at.wg == 0 ? f0 : f1;
  }
  const int t = static_cast<int>(threadIdx.x) & (kConsumerThreads / 2 - 1);
#pragma unroll
  for (int round = 0; round < HeadsInN<kN>::kMergeRounds; ++round) {
#pragma unroll
    for (int k = 0; k < kPanels; ++k) {
      const int low = round * kPanels + k;  // panel `low` goes to WG0, `low + 4` to WG1
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        const float send = at.wg == 0 ? o[low + kLeftPanels][i] : o[low][i];
        sm.merge[at.wg][k * kAcc + i][t] = send * own[column_of(i)];
      }
    }
    ptx::named_barrier_sync(kMergeBarrier, kConsumerThreads);
#pragma unroll
    for (int k = 0; k < kPanels; ++k) {
      const int low = round * kPanels + k;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        const float mine = at.wg == 0 ? o[low][i] : o[low + kLeftPanels][i];
        keep[low][i] = mine * own[column_of(i)] + sm.merge[1 - at.wg][k * kAcc + i][t];
      }
    }
    if (round + 1 < HeadsInN<kN>::kMergeRounds) {
      ptx::named_barrier_sync(kMergeBarrier, kConsumerThreads);
    }
  }
}

// The warpgroup's half of a work item's output in bf16 through shared memory: `keep` (its 256 dims
// x kN heads) times scale[column] into `staging` ([kN heads][256 dims], 512-B rows whose 16-B
// chunks are XOR-swizzled by head % 8, so that the four heads of one store instruction hit
// distinct banks), a barrier of the warpgroup, then 16-B chunks out: head h's 256 dims to
// dst + h * head_stride (elements; 16-B aligned rows), for h < heads. Where a thread's
// accumulators would go out one 2-B element per store (two dims of each of its heads, half
// sectors), a warp writes whole 512-B rows. staging: the peer's `merge` buffer, which the peer
// writes again only after the next item's statistics barrier; a first barrier of the warpgroup
// lets all of its threads finish their reads of it (merge_warpgroups' last round) before any
// thread's staging writes.
template <int kN, int kWg>
__device__ __forceinline__ void store_bf16_heads(uint8_t* staging, const ColumnPlace& at,
                                                 const float (&keep)[kLeftPanels][kN / 2],
                                                 const float (&scale)[HeadsInN<kN>::kColumns],
                                                 int heads, uint16_t* dst, int64_t head_stride) {
  static_assert(kN * 512 <= static_cast<int>(sizeof(float)) * HeadsInN<kN>::kMergePanels *
                                HeadsInN<kN>::kAccRegs * kWarpgroupThreads,
                "the bf16 rows must fit one merge buffer");
  ptx::named_barrier_sync(kColumnBarrier + kWg, kWarpgroupThreads);
#pragma unroll
  for (int k = 0; k < kLeftPanels; ++k) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const int h = at.head(column_of(i));
      const int dim = 64 * k + at.row[(i >> 1) & 1];
      *reinterpret_cast<uint16_t*>(staging + h * 512 + (((dim >> 3) ^ (h & 7)) << 4) +
                                   (dim & 7) * 2) =
          static_cast<uint16_t>(ptx::pack_bf16x2(keep[k][i] * scale[column_of(i)], 0.0f));
    }
  }
  ptx::named_barrier_sync(kColumnBarrier + kWg, kWarpgroupThreads);
  const int t = static_cast<int>(threadIdx.x) & (kWarpgroupThreads - 1);
#pragma unroll
  for (int c = t; c < kN * 32; c += kWarpgroupThreads) {
    const int h = c >> 5, chunk = c & 31;
    if (h < heads) {
      *reinterpret_cast<uint4*>(dst + h * head_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(staging + h * 512 + ((chunk ^ (h & 7)) << 4));
    }
  }
}

}  // namespace sparse_mla::cuda::sm90a
