// The consumer warpgroups of the Hopper "seesaw" kernels (docs/kernels/sm90a_sparse_prefill.md,
// FlashMLA's schedule): WG0 and WG1 each score their own block of a pair (S = Q K^T, m64n64k16,
// both operands from shared memory), exchange row maxima so both blocks' P share one running
// max, and each accumulate their half of the output columns over both blocks (O += P V,
// m64n256k16: the own P from registers, the peer's from a P tile). What they read is the plan of
// seesaw/config.cuh: Q, the two-stage ring of half-stages with its full / empty barriers, the P
// tiles and the row statistics. The producer that fills the ring and the store of a finished work
// item belong to each kernel (sparse_prefill/kernel.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cluster.cuh"  // mbarrier wait and arrive
#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/ptx/wgmma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/seesaw/config.cuh"

namespace sparse_mla::cuda::sm90a {

// A consumer thread's place: warpgroup wg (0, 1), warp w in it (rows 16 w .. 16 w + 15), lane.
struct ConsumerPlace {
  int wg, lane;
  int row[2];  // its two rows (heads within the group): accumulator i holds row[(i >> 1) & 1]
  // wg through a shuffle: the compiler then knows it is warp-uniform and keeps the descriptor
  // arithmetic that depends on it in uniform registers (no R2UR per wgmma).
  __device__ __forceinline__ explicit ConsumerPlace(int t)
      : wg(__shfl_sync(0xffffffffu, t >> 7, 0)), lane(t & 31) {
    row[0] = 16 * ((t >> 5) & 3) + (lane >> 2);
    row[1] = row[0] + 8;
  }
  // Column (key or output dim) of accumulator i within its 8-wide slice pattern.
  __device__ __forceinline__ int col(int i) const {
    return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
  }
};

// S[64 heads, 64 keys] (+)= Q K^T over the k-steps of panels [kFirst, kEnd) of stage tile `kv`;
// kOverwrite: the first of them overwrites S (the first panels a warpgroup issues).
template <int kFirst, int kEnd, bool kOverwrite>
__device__ __forceinline__ void issue_score_panels(uint32_t q, uint32_t kv, float (&s)[32]) {
  // One descriptor per operand; a k-step moves its start address field by offset / 16.
  const uint64_t desc_q = ptx::wgmma_desc_sw128(q, 16, 1024);
  const uint64_t desc_k = ptx::wgmma_desc_sw128(kv, 16, 1024);
#pragma unroll
  for (int step = 4 * kFirst; step < 4 * kEnd; ++step) {
    const uint32_t offset = ((step >> 2) * kPanelBytes + (step & 3) * 32) >> 4;
    ptx::wgmma_m64n64k16_ss<0>(s, desc_q + offset, desc_k + offset,
                               !kOverwrite || step > 4 * kFirst);
  }
}

// What the scoring warpgroup does to a half-stage between its landing and its first MMA: nothing
// where the producer fills the ring with bf16 rows (the prefill); a kernel whose producer only
// copies raw bytes passes a Prepare whose half<kStage, kHalf>(sm) turns them into bf16 rows (the
// warpgroup's 128 threads, ending with the async-proxy fence and a barrier of the warpgroup).
struct NoPrepare {
  template <int kStage, int kHalf, class SmemT>
  __device__ __forceinline__ static void half(SmemT&) {}
};

// Issues S (+)= Q K^T over one half of stage kStage's panels (half 0: panels 0-3, half 1: the
// rest) once that half has landed (and Prepare made it bf16); kOverwrite: its first k-step
// overwrites S.
template <int kDqk, int kStage, int kHalf, bool kOverwrite, class Prepare = NoPrepare>
__device__ __forceinline__ void issue_score_half(uint32_t q, Smem<kDqk>& sm, uint32_t parity,
                                                 float (&s)[32]) {
  const uint32_t kv = smem_u32(sm.kv[kStage]);
  ptx::mbarrier_wait_parity(smem_u32(&sm.full[2 * kStage + kHalf]), parity);
  Prepare::template half<kStage, kHalf>(sm);
  if constexpr (kHalf == 0) {
    issue_score_panels<0, kLeftPanels, kOverwrite>(q, kv, s);
  } else {
    issue_score_panels<kLeftPanels, kDqk / 64, kOverwrite>(q, kv, s);
  }
}

// The half of stage kStage its scorer frees first and the producer refills first (WG0's K0: left;
// WG1's K1: right): its MMAs run while the other half's rows are still in flight.
template <int kStage>
inline constexpr int kFirstScoreHalf = kStage == 0 ? 0 : 1;

// S = Q K^T of stage `kStage` at pair parity `parity`; waits for the result.
template <int kDqk, int kStage, class Prepare = NoPrepare>
__device__ __forceinline__ void scores(uint32_t q, Smem<kDqk>& sm, uint32_t parity,
                                       float (&s)[32]) {
  constexpr int kFirst = kFirstScoreHalf<kStage>;
  ptx::wgmma_fence_operands(s);
  ptx::wgmma_fence();
  issue_score_half<kDqk, kStage, kFirst, true, Prepare>(q, sm, parity, s);
  issue_score_half<kDqk, kStage, 1 - kFirst, false, Prepare>(q, sm, parity, s);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operands(s);
}

// Which keys a row attends, from their validity flags (one byte per key of a block): KeysOfAll
// where every row attends every valid key; the decode over an index union passes one whose rows
// attend only the keys that hold their token's bit (sparse_decode/kernel.cuh).
struct KeysOfAll {
  __device__ __forceinline__ bool operator()(uint32_t flag, int) const { return flag != 0; }
};

// Scores to the log2 domain, slots the row does not attend -inf; returns the quad's row maxima of
// the block. admit(flag, h): whether the thread's row h attends a key with that flag.
template <class Admit>
__device__ __forceinline__ void mask_scores(const uint8_t* valid, const ConsumerPlace& at,
                                            const Admit& admit, float scale_log2, float (&s)[32],
                                            float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
  // Accumulators 4 q .. 4 q + 3 share their two keys (8 q + 2 (lane % 4), +1): one 2-byte load.
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const uint16_t pair = *reinterpret_cast<const uint16_t*>(valid + at.col(i & ~1));
    const bool ok = admit((i & 1) ? (pair >> 8) : (pair & 0xff), (i >> 1) & 1);
    s[i] = ok ? s[i] * scale_log2 : -INFINITY;
    mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
  }
  mx[0] = quad_max(mx[0]);
  mx[1] = quad_max(mx[1]);
}

// P = 2^(S - m_use) as the RS A fragments of the four 16-key steps; adds P to the row sums.
__device__ __forceinline__ void exponentiate(const float (&s)[32], const float (&m_use)[2],
                                             float (&l)[2], uint32_t (&p)[4][4]) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int h = (i >> 1) & 1;
    const float p0 = fast_exp2(s[i] - m_use[h]);
    const float p1 = fast_exp2(s[i + 1] - m_use[h]);
    l[h] += p0 + p1;
    p[i >> 3][(i >> 1) & 3] = ptx::pack_bf16x2(p0, p1);
  }
}

// O *= alpha per row, skipped where both rows' alpha is exactly 1 (a settled max).
__device__ __forceinline__ void rescale(const float (&alpha)[2], float (&o)[128]) {
  if (alpha[0] != 1.0f || alpha[1] != 1.0f) {
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
  }
}

// Byte offset of the bf16 pair (row, key..key+1) in a swizzled [64, 64] P tile.
__device__ __forceinline__ uint32_t p_offset(int row, int key) {
  return row * 128 + ((((key >> 3) ^ (row & 7))) << 4) + (key & 7) * 2;
}

// The thread's P fragments into a P tile, made visible to the peer's wgmma (async proxy).
__device__ __forceinline__ void store_p(uint8_t* tile, const ConsumerPlace& at,
                                        const uint32_t (&p)[4][4]) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    *reinterpret_cast<uint32_t*>(tile + p_offset(at.row[(i >> 1) & 1], at.col(i))) =
        p[i >> 3][(i >> 1) & 3];
  }
  ptx::fence_proxy_async_shared();
}

// O[64 heads, 256 dims of wg] += P[64, 64 keys] V[64 keys, dims] with P from registers; V = dims
// [256 wg, +256) of the stage tile read MN-major (4 panels of 64 dims, 8 KiB apart).
__device__ __forceinline__ uint64_t value_desc(uint32_t kv, int wg) {
  return ptx::wgmma_desc_sw128(kv + kLeftPanels * wg * kPanelBytes, kPanelBytes, 1024);
}

__device__ __forceinline__ void issue_products_rs(uint32_t kv, int wg, const uint32_t (&p)[4][4],
                                                  float (&o)[128]) {
  const uint64_t desc_v = value_desc(kv, wg);
  ptx::wgmma_fence_operands(o);
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    ptx::wgmma_m64n256k16_rs<1>(o, p[step], desc_v + ((16 * step * 128) >> 4), true);
  }
  ptx::wgmma_commit_group();
}

// One arrival per warp of the releasing warpgroup on a half-stage's empty barrier.
__device__ __forceinline__ void release(uint64_t& empty, const ConsumerPlace& at) {
  __syncwarp();
  if (at.lane == 0) ptx::mbarrier_arrive(smem_u32(&empty));
}

// A pair's last products, O += P V with P from a shared tile (the peer's), then frees `empty`
// (the half-stage they read). With queue_next the warpgroup's scores of the next pair (stage
// kStage) are queued behind the products, so the tensor cores go on from one to the other
// without waiting for this warpgroup's round trip through wait, release and the next pair's
// barrier wait; S holds them on return. WG0 does so; WG1 does not: its next scores would then
// run beside WG0's, both softmaxes would fall together, and the seesaw's stagger would be lost
// (8-20 % slower at d576 h128, docs/kernels/sm90a_sparse_prefill.md).
template <int kDqk, int kStage, class Prepare = NoPrepare>
__device__ __forceinline__ void products_ss_then_scores(uint32_t kv, uint32_t p_tile, int wg,
                                                        uint32_t q, Smem<kDqk>& sm, bool queue_next,
                                                        uint32_t next_parity, uint64_t& empty,
                                                        const ConsumerPlace& at, float (&o)[128],
                                                        float (&s)[32]) {
  const uint64_t desc_v = value_desc(kv, wg);
  const uint64_t desc_p = ptx::wgmma_desc_sw128(p_tile, 16, 1024);
  ptx::wgmma_fence_operands(o);
  ptx::wgmma_fence_operands(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    ptx::wgmma_m64n256k16_ss<1>(o, desc_p + ((32 * step) >> 4), desc_v + ((16 * step * 128) >> 4),
                                true);
  }
  ptx::wgmma_commit_group();
  if (queue_next) {
    constexpr int kFirst = kFirstScoreHalf<kStage>;
    issue_score_half<kDqk, kStage, kFirst, true, Prepare>(q, sm, next_parity, s);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<1>();
    ptx::wgmma_fence_operands(o);
    release(empty, at);
    issue_score_half<kDqk, kStage, 1 - kFirst, false, Prepare>(q, sm, next_parity, s);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operands(s);
  } else {
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operands(o);
    release(empty, at);
  }
}

// Both warpgroups hold the same running max m (per row, log2 domain) at every pair boundary, and
// each its own share l of the row sums at that max: WG0 over the K0 blocks, WG1 over the K1 blocks.
// m moves lazily (advance_running_max_lazy); max is the true max of the warpgroup's own blocks.
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  float max[2] = {-INFINITY, -INFINITY};
};

// WG0's pair, S0 = Q K0^T in s on entry: max after K0 (to WG1) -> P0 -> O_L += P0 V0_L -> the
// pair's max (from WG1) -> P0 and O_L to it -> P0 to its tile (for WG1's O_R) -> O_L += P1 V1_L,
// the next pair's S0 queued behind it.
template <int kDqk, class Prepare = NoPrepare, class Admit>
__device__ __forceinline__ void consume_pair_wg0(uint32_t q, uint8_t* p0_tile, uint32_t p1_tile,
                                                 const ConsumerPlace& at, const Admit& admit,
                                                 float scale_log2, uint32_t pair, bool has_next,
                                                 Smem<kDqk>& sm, RowState& st, float (&s)[32],
                                                 float (&o)[128]) {
  float mx[2], m_use[2], alpha[2];
  mask_scores(sm.valid[0], at, admit, scale_log2, s, mx);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.max[h] = fmaxf(st.max[h], mx[h]);
    const RunningMaxStep step = advance_running_max_lazy(st.m[h], mx[h]);
    m_use[h] = step.m_use;
    alpha[h] = step.alpha;
    st.l[h] *= alpha[h];
    if ((at.lane & 3) == 0) sm.row_max[0][at.row[h]] = st.m[h];
  }
  ptx::named_barrier_arrive(kWg0MaxReady, kConsumerThreads);
  uint32_t p[4][4];
  exponentiate(s, m_use, st.l, p);
  rescale(alpha, o);
  const uint32_t kv0 = smem_u32(sm.kv[0]);
  issue_products_rs(kv0, 0, p, o);
  ptx::named_barrier_sync(kWg1MaxReady, kConsumerThreads);
  float beta[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // WG1's m is never below WG0's (it moved from max(WG0's m, its block max)): adopt it as is.
    const RunningMaxStep step = advance_running_max(st.m[h], sm.row_max[1][at.row[h]]);
    beta[h] = step.alpha;
    st.l[h] *= beta[h];
  }
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operands(o);
  release(sm.empty[0], at);  // K0 left: read by WG0 only
  if (beta[0] != 1.0f || beta[1] != 1.0f) {
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      uint32_t& pair_bits = p[i >> 3][(i >> 1) & 3];
      const float b = beta[(i >> 1) & 1];
      pair_bits = ptx::pack_bf16x2(__uint_as_float(pair_bits << 16) * b,
                                   __uint_as_float(pair_bits & 0xffff0000u) * b);
    }
    rescale(beta, o);
  }
  store_p(p0_tile, at, p);
  ptx::named_barrier_arrive(kP0Ready, kConsumerThreads);
  ptx::named_barrier_sync(kP1Ready, kConsumerThreads);
  // K1 left: WG1's scores finished before P1 was ready.
  products_ss_then_scores<kDqk, 0, Prepare>(smem_u32(sm.kv[1]), p1_tile, 0, q, sm, has_next,
                                            (pair + 1) & 1, sm.empty[2], at, o, s);
}

// WG1's pair: S1 = Q K1^T -> the pair's max (WG0's after K0 and its own; to WG0) -> P1 ->
// O_R += P1 V1_R, P1 to its tile (for WG0's O_L) -> O_R += P0 V0_R. last: the item's last pair
// (Q is free once its scores are done).
template <int kDqk, class Prepare = NoPrepare, class Admit>
__device__ __forceinline__ void consume_pair_wg1(uint32_t q, uint8_t* p1_tile, uint32_t p0_tile,
                                                 const ConsumerPlace& at, const Admit& admit,
                                                 float scale_log2, uint32_t pair, bool last,
                                                 Smem<kDqk>& sm, RowState& st, float (&s)[32],
                                                 float (&o)[128]) {
  scores<kDqk, 1, Prepare>(q, sm, pair & 1, s);
  if (last) release(sm.q_empty, at);
  float mx[2], m_use[2], alpha[2];
  mask_scores(sm.valid[1], at, admit, scale_log2, s, mx);
  ptx::named_barrier_sync(kWg0MaxReady, kConsumerThreads);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.max[h] = fmaxf(st.max[h], mx[h]);
    const float both = fmaxf(sm.row_max[0][at.row[h]], mx[h]);
    const RunningMaxStep step = advance_running_max_lazy(st.m[h], both);
    m_use[h] = step.m_use;
    alpha[h] = step.alpha;
    st.l[h] *= alpha[h];
    if ((at.lane & 3) == 0) sm.row_max[1][at.row[h]] = st.m[h];
  }
  ptx::named_barrier_arrive(kWg1MaxReady, kConsumerThreads);
  uint32_t p[4][4];
  exponentiate(s, m_use, st.l, p);
  rescale(alpha, o);
  issue_products_rs(smem_u32(sm.kv[1]), 1, p, o);
  store_p(p1_tile, at, p);
  ptx::named_barrier_arrive(kP1Ready, kConsumerThreads);
  ptx::wgmma_wait_group<0>();
  ptx::wgmma_fence_operands(o);
  release(sm.empty[3], at);  // K1 right: read by WG1 only
  ptx::named_barrier_sync(kP0Ready, kConsumerThreads);
  // K0 right: WG0's scores finished before P0 was ready.
  products_ss_then_scores<kDqk, 1>(smem_u32(sm.kv[0]), p0_tile, 1, q, sm, false, 0, sm.empty[1], at,
                                   o, s);
}

// A 4 x 4 transpose of 32-bit words across the four lanes of a quad (q = lane % 4): on return
// lane q holds a[m] = lane m's a[q] on entry. Two exchange rounds (lanes q ^ 1, then q ^ 2), each
// swapping the two words whose index bit differs from the lane's.
__device__ __forceinline__ void quad_transpose(uint32_t (&a)[4], int q) {
  const bool odd = (q & 1) != 0;
  const uint32_t r0 = __shfl_xor_sync(0xffffffffu, odd ? a[0] : a[1], 1);
  const uint32_t r1 = __shfl_xor_sync(0xffffffffu, odd ? a[2] : a[3], 1);
  // Selects, not a[odd ? 0 : 1]: a lane-dependent index would put the array in local memory.
  a[0] = odd ? r0 : a[0];
  a[1] = odd ? a[1] : r0;
  a[2] = odd ? r1 : a[2];
  a[3] = odd ? a[3] : r1;
  const bool high = (q & 2) != 0;
  const uint32_t r2 = __shfl_xor_sync(0xffffffffu, high ? a[0] : a[2], 2);
  const uint32_t r3 = __shfl_xor_sync(0xffffffffu, high ? a[1] : a[3], 2);
  a[0] = high ? r2 : a[0];
  a[2] = high ? a[2] : r2;
  a[1] = high ? r3 : a[1];
  a[3] = high ? a[3] : r3;
}

// One work item's pairs (num_pairs >= 0) from the CTA's ring pair `ring_pairs` on, its Q at phase
// `item_count` of q_full: o and st hold the item's accumulators and row state on return. The
// item's last scores free Q (q_empty, both warpgroups), so the producer may load the next item's.
template <int kDqk, class Prepare = NoPrepare, class Admit = KeysOfAll>
__device__ __forceinline__ void consume_item_pairs(uint32_t q, uint8_t* p0_tile, uint8_t* p1_tile,
                                                   const ConsumerPlace& at, float scale_log2,
                                                   int num_pairs, uint32_t ring_pairs,
                                                   uint32_t item_count, Smem<kDqk>& sm,
                                                   RowState& st, float (&o)[128],
                                                   const Admit& admit = {}) {
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  // Scores of the warpgroup's next block: WG0's are computed ahead (in the previous pair's
  // tail), WG1's at the start of its pair. One array for both, so that the loop-carried one does
  // not stay live beside WG1's.
  float s[32];
  ptx::mbarrier_wait_parity(smem_u32(&sm.q_full), item_count & 1);
  if (num_pairs > 0 && at.wg == 0) scores<kDqk, 0, Prepare>(q, sm, ring_pairs & 1, s);
  for (int pair = 0; pair < num_pairs; ++pair) {
    const bool has_next = pair + 1 < num_pairs;
    const uint32_t ring_pair = ring_pairs + pair;
    if (at.wg == 0) {
      // WG0's last scores of the item are done: with WG1's, the producer may load the next Q.
      if (!has_next) release(sm.q_empty, at);
      consume_pair_wg0<kDqk, Prepare>(q, p0_tile, smem_u32(p1_tile), at, admit, scale_log2,
                                      ring_pair, has_next, sm, st, s, o);
    } else {
      consume_pair_wg1<kDqk, Prepare>(q, p1_tile, smem_u32(p0_tile), at, admit, scale_log2,
                                      ring_pair, !has_next, sm, st, s, o);
    }
  }
  if (num_pairs == 0) release(sm.q_empty, at);
}

// The epilogue's first step: each warpgroup's row sums (quad sums of the threads' shares) into
// row_sum[wg] (one of two buffers by item parity: after an item without pairs the peer may still
// read the previous item's) and, where row_max_peer is given, WG1's true row max into it; then
// the barrier after which either warpgroup reads both. row_max_peer is one buffer, so it may be
// given only for an item with pairs: then WG0 read row_max[1] last in the item's final pair,
// before it marked P0 ready, which WG1's final products waited for, and its store of the
// previous item was done before it let WG1 into the item's first pair (kWg0MaxReady). After an
// item without pairs WG1 would write it while WG0 may still be reading the previous item's
// (6 of 896 max_logits wrong under compute-sanitizer, s_q 7 h_q 128 topk 200 with lengths 0);
// such an item's rows are empty and read no max.
__device__ __forceinline__ void publish_row_sums(const ConsumerPlace& at, RowState& st,
                                                 float (&row_sum)[2][kHeadRows],
                                                 float* row_max_peer) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.l[h] = quad_sum(st.l[h]);
    if ((at.lane & 3) == 0) {
      row_sum[at.wg][at.row[h]] = st.l[h];
      if (row_max_peer != nullptr && at.wg == 1) row_max_peer[at.row[h]] = st.max[h];
    }
  }
  ptx::named_barrier_sync(kRowSumReady, kConsumerThreads);
}

}  // namespace sparse_mla::cuda::sm90a
