// Hopper (sm_90a) sparse prefill kernel (SPEC §2; design in config.cuh and
// docs/kernels/sm90a_sparse_prefill.md). Grid: one CTA per (query token, 64-head group),
// blockIdx.x = token * head_groups + group. Roles:
//   producer   Q once, then per block j of 64 slots: wait until stage j % 2 is free, cp.async
//              the rows (invalid slots zero-filled from row 0, never read), write the slots'
//              validity, arrive on the stage's full barrier when the copies land;
//   consumers  per block: score their key half, exchange row maxima, online softmax, exchange P
//              halves, accumulate their output half, then issue the next block's scores behind
//              the products and release the stage as soon as the products retire;
//   store      out (sink applied) straight from the accumulators, max_logits and lse in natural
//              log by WG0.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/params.h"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cluster.cuh"  // mbarrier init and wait
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/ptx/mma.cuh"
#include "cuda/device/ptx/warpgroup.cuh"
#include "cuda/device/ptx/wgmma.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_prefill/token_slots.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "cuda/sm90a/sparse_prefill/config.cuh"
#include "cuda/sm90a/sparse_prefill/launch.h"

namespace sparse_mla::cuda::sm90a_prefill {

// ---- producer ------------------------------------------------------------------------------

// Producer thread t (0..127) copies 16-B chunk t % 8 of every 128-B panel row of rows
// t / 8 + 16 r, r < 4: a group of 8 threads reads one 128-B run of a row, and as 16 is a multiple
// of the swizzle period the chunk's XOR (row % 8) is the same for all four rows.
struct ProducerPlace {
  int group, chunk;  // rows group + 16 r; chunk within each 64-dim panel
  uint32_t swizzled_chunk_bytes;
  __device__ __forceinline__ explicit ProducerPlace(int t)
      : group(t >> 3), chunk(t & 7), swizzled_chunk_bytes(((t & 7) ^ ((t >> 3) & 7)) << 4) {}
};

// The thread's four rows of a [64, d_qk] tile from `src[r]` (readable addresses), zero-filled
// where !valid.
template <int kDqk>
__device__ __forceinline__ void copy_rows(uint32_t tile, const ProducerPlace& at,
                                          const uint8_t* const (&src)[4], const bool (&valid)[4]) {
  constexpr int kPanels = kDqk / 64;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint32_t row_base = tile + (at.group + 16 * r) * 128 + at.swizzled_chunk_bytes;
    const uint8_t* row_src = src[r] + 16 * at.chunk;
#pragma unroll
    for (int panel = 0; panel < kPanels; ++panel) {
      ptx::cp_async_cg_16(row_base + panel * kPanelBytes, row_src + 128 * panel,
                          valid[r] ? 16u : 0u);
    }
  }
}

template <int kDqk>
__device__ __forceinline__ void produce(const detail::PrefillParams& p, int64_t token, int head0,
                                        const portable_prefill::TokenSlots& slots, int t,
                                        Smem<kDqk>& sm) {
  const ProducerPlace at(t);
  {
    const uint8_t* token_q = reinterpret_cast<const uint8_t*>(p.q + token * p.q_stride_s);
    const uint8_t* src[4];
    bool valid[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int head = head0 + at.group + 16 * r;
      valid[r] = head < p.problem.h_q;
      src[r] = token_q + (valid[r] ? head : 0) * p.q_stride_h * 2;
    }
    copy_rows<kDqk>(smem_u32(sm.q), at, src, valid);
    ptx::cp_async_mbarrier_arrive_noinc(smem_u32(&sm.q_full));
  }
  const uint8_t* kv = reinterpret_cast<const uint8_t*>(p.kv);
  for (int block = 0; block < slots.num_blocks; ++block) {
    const int stage = block % kStages;
    // Slot k of the block is valid iff k < n_valid (topk_length) and 0 <= index < s_kv.
    const uint8_t* src[4];
    bool valid[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t k = static_cast<int64_t>(block) * kBlockKeys + at.group + 16 * r;
      const int32_t index = k < slots.n_valid ? __ldg(slots.indices + k) : -1;
      valid[r] = index >= 0 && index < p.problem.s_kv;
      src[r] = kv + (valid[r] ? static_cast<int64_t>(index) * p.kv_stride_s * 2 : 0);
    }
    if (block >= kStages) {
      ptx::mbarrier_wait_parity(smem_u32(&sm.empty[stage]), ((block / kStages) - 1) & 1);
    }
    if (at.chunk == 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r) sm.valid[stage][at.group + 16 * r] = valid[r] ? 1 : 0;
    }
    const uint32_t full = smem_u32(&sm.full[stage]);
    copy_rows<kDqk>(smem_u32(sm.kv[stage]), at, src, valid);
    ptx::cp_async_mbarrier_arrive_noinc(full);
    if (at.chunk == 0) ptx::mbarrier_arrive(full);
  }
  ptx::cp_async_wait<0>();
}

// ---- consumers -----------------------------------------------------------------------------

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

// S[64 heads, 32 keys] = Q K^T over keys [32 wg, +32) of stage `kv`: d_qk / 16 k-steps.
template <int kDqk>
__device__ __forceinline__ void issue_scores(uint32_t q, uint32_t kv, int wg, float (&s)[16]) {
  // One descriptor per operand; a k-step moves its start address field by offset / 16.
  const uint64_t desc_q = ptx::wgmma_desc_sw128(q, 16, 1024);
  const uint64_t desc_k = ptx::wgmma_desc_sw128(kv + 32 * wg * 128, 16, 1024);
  ptx::wgmma_fence_operands(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < kDqk / 16; ++step) {
    const uint32_t offset = ((step >> 2) * kPanelBytes + (step & 3) * 32) >> 4;
    ptx::wgmma_m64n32k16_ss<0>(s, desc_q + offset, desc_k + offset, step > 0);
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_fence_operands(s);
}

// O[64 heads, 256 dims of wg] += P[64, 64 keys] V[64 keys, dims]: keys of this warpgroup's half
// with P from registers, the peer's half with P from shared memory. V = dims [256 wg, +256) of
// the stage's K tile read MN-major (4 panels of 64 dims, 8 KiB apart).
__device__ __forceinline__ void issue_products(uint32_t kv, uint32_t p_tile, int wg,
                                               const uint32_t (&p_own)[2][4], float (&o)[128]) {
  const int peer = 1 - wg;
  const uint64_t desc_v = ptx::wgmma_desc_sw128(kv + 4 * wg * kPanelBytes, kPanelBytes, 1024);
  const uint64_t desc_p = ptx::wgmma_desc_sw128(p_tile + 64 * peer, 16, 1024);
  ptx::wgmma_fence_operands(o);
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    ptx::wgmma_m64n256k16_rs<1>(o, p_own[step], desc_v + (((32 * wg + 16 * step) * 128) >> 4),
                                true);
  }
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    ptx::wgmma_m64n256k16_ss<1>(o, desc_p + ((32 * step) >> 4),
                                desc_v + (((32 * peer + 16 * step) * 128) >> 4), true);
  }
  ptx::wgmma_commit_group();
  ptx::wgmma_fence_operands(o);
}

// Byte offset of the bf16 pair (row, key..key+1) in the swizzled [64, 64] P tile.
__device__ __forceinline__ uint32_t p_offset(int row, int key) {
  return row * 128 + ((((key >> 3) ^ (row & 7))) << 4) + (key & 7) * 2;
}

// One arrival per consumer warp on the stage's empty barrier.
__device__ __forceinline__ void release_stage(uint32_t empty, const ConsumerPlace& at) {
  __syncwarp();
  if (at.lane == 0) ptx::mbarrier_arrive(empty);
}

template <int kDqk>
__device__ __forceinline__ void consume(const detail::PrefillParams& p, int64_t token, int head0,
                                        const portable_prefill::TokenSlots& slots, int t,
                                        Smem<kDqk>& sm) {
  const ConsumerPlace at(t);
  const float scale_log2 = p.sm_scale * kLog2e;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running row max, log2 domain (identical in both WGs)
  float l[2] = {0.0f, 0.0f};            // this thread's share of the row sums over its keys
  float s[16];
  const uint32_t q = smem_u32(sm.q);
  // One P tile serves every block: a warpgroup writes its half of block j's P only after both
  // finished block j - 1 (each waits for all its wgmma groups before the row-max barrier).
  const uint32_t p_tile = smem_u32(sm.p);

  if (slots.num_blocks > 0) {
    ptx::mbarrier_wait_parity(smem_u32(&sm.q_full), 0);
    ptx::mbarrier_wait_parity(smem_u32(&sm.full[0]), 0);
    issue_scores<kDqk>(q, smem_u32(sm.kv[0]), at.wg, s);
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operands(s);
  }
  // Each iteration ends with a wait for all its wgmma groups: the loop's back edge then carries
  // no accumulator that an in-flight wgmma still writes (ptxas otherwise serialises every wgmma,
  // C7514 / C7515).
  for (int block = 0; block < slots.num_blocks; ++block) {
    const int stage = block % kStages;
    // Scores in the log2 domain; invalid slots -inf. Row maxima over this warpgroup's keys.
    // Accumulators 4 q .. 4 q + 3 share their two keys (8 q + 2 (lane % 4), +1): one 2-byte load.
    float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint16_t pair =
          *reinterpret_cast<const uint16_t*>(&sm.valid[stage][32 * at.wg + at.col(i & ~1)]);
      const bool valid = ((i & 1) ? (pair >> 8) : (pair & 0xff)) != 0;
      s[i] = valid ? s[i] * scale_log2 : -INFINITY;
      block_max[(i >> 1) & 1] = fmaxf(block_max[(i >> 1) & 1], s[i]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      block_max[h] = quad_max(block_max[h]);
      if ((at.lane & 3) == 0) sm.row_max[at.wg][at.row[h]] = block_max[h];
    }
    ptx::named_barrier_sync(kRowMaxReady, kConsumerThreads);
    float alpha[2], m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float both = fmaxf(sm.row_max[0][at.row[h]], sm.row_max[1][at.row[h]]);
      const RunningMaxStep step = advance_running_max(m[h], both);
      alpha[h] = step.alpha;
      m_use[h] = step.m_use;
      l[h] *= alpha[h];
    }
    uint32_t p_own[2][4];
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const int h = (i >> 1) & 1;
      const float p0 = fast_exp2(s[i] - m_use[h]);
      const float p1 = fast_exp2(s[i + 1] - m_use[h]);
      l[h] += p0 + p1;
      const uint32_t packed = ptx::pack_bf16x2(p0, p1);
      p_own[i >> 3][(i >> 1) & 3] = packed;
      *reinterpret_cast<uint32_t*>(sm.p + p_offset(at.row[h], 32 * at.wg + at.col(i))) = packed;
    }
    // Once a row's max has settled its alpha is exactly 1: skip the 128 multiplies then.
    if (alpha[0] != 1.0f || alpha[1] != 1.0f) {
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
    }
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(kPReady, kConsumerThreads);
    issue_products(smem_u32(sm.kv[stage]), p_tile, at.wg, p_own, o);
    // The stage is released as soon as this block's products are done (groups retire in
    // order), while the next block's scores may still run: the producer refills it earlier.
    if (block + 1 < slots.num_blocks) {
      const int next = (block + 1) % kStages;
      ptx::mbarrier_wait_parity(smem_u32(&sm.full[next]), ((block + 1) / kStages) & 1);
      issue_scores<kDqk>(q, smem_u32(sm.kv[next]), at.wg, s);
      ptx::wgmma_wait_group<1>();
    } else {
      ptx::wgmma_wait_group<0>();
    }
    ptx::wgmma_fence_operands(o);
    release_stage(smem_u32(&sm.empty[stage]), at);
    ptx::wgmma_wait_group<0>();  // the next block's scores
    ptx::wgmma_fence_operands(s);
  }

  // Row sums over both warpgroups' keys; the output scale with the sink.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = quad_sum(l[h]);
    if ((at.lane & 3) == 0) sm.row_sum[at.wg][at.row[h]] = l[h];
  }
  ptx::named_barrier_sync(kRowSumReady, kConsumerThreads);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = head0 + at.row[h];
    if (head >= p.problem.h_q) continue;
    const float l_total = sm.row_sum[0][at.row[h]] + sm.row_sum[1][at.row[h]];
    const float* sink = p.attn_sink != nullptr ? p.attn_sink + head * p.attn_sink_stride : nullptr;
    const float scale = l_total > 0.0f ? output_scale(m[h], l_total, sink) : 0.0f;
    uint16_t* out_row = p.out + token * p.out_stride_s + head * p.out_stride_h + 256 * at.wg;
#pragma unroll
    for (int i = 2 * h; i < 128; i += 4) {
      *reinterpret_cast<uint32_t*>(out_row + at.col(i)) =
          ptx::pack_bf16x2(o[i] * scale, o[i + 1] * scale);
    }
    if (at.wg == 0 && (at.lane & 3) == 0) {
      const bool empty = !(l_total > 0.0f);
      p.lse[token * p.lse_stride_s + head * p.lse_stride_h] =
          empty ? INFINITY : (m[h] + log2f(l_total)) * kLn2;
      p.max_logits[token * p.max_logits_stride_s + head * p.max_logits_stride_h] =
          empty ? -INFINITY : m[h] * kLn2;
    }
  }
}

template <int kDqk>
__global__ void __launch_bounds__(kThreads, 1)
    sm90a_sparse_prefill_kernel(const detail::PrefillParams p, int head_groups) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  // wgmma's 128-B swizzle is computed from address bits: tiles must sit on 1 KiB boundaries.
  auto& sm =
      *reinterpret_cast<Smem<kDqk>*>(smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023));
  const int thread = threadIdx.x;
  const int64_t token = blockIdx.x / head_groups;
  const int head0 = static_cast<int>(blockIdx.x % head_groups) * kHeadRows;
  const portable_prefill::TokenSlots slots = portable_prefill::token_slots<kBlockKeys>(p, token);

  if (thread == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.full[s]), kFullArrivals);
      ptx::mbarrier_init_for_cluster(smem_u32(&sm.empty[s]), kEmptyArrivals);
    }
    ptx::mbarrier_init_for_cluster(smem_u32(&sm.q_full), kProducerThreads);
  }
  __syncthreads();

  if (thread >= kConsumerThreads) {
    ptx::setmaxnreg_dec<kProducerRegs>();
    produce<kDqk>(p, token, head0, slots, thread - kConsumerThreads, sm);
  } else {
    ptx::setmaxnreg_inc<kConsumerRegs>();
    consume<kDqk>(p, token, head0, slots, thread, sm);
  }
#else
  __trap();
#endif
}

template <int kDqk>
int sm90a_prefill_smem_bytes() {
  return static_cast<int>(sizeof(Smem<kDqk>)) + 1024;
}

template <int kDqk>
Status launch_sm90a_sparse_prefill(const detail::PrefillParams& p, cudaStream_t stream) {
  const int head_groups = static_cast<int>((p.problem.h_q + kHeadRows - 1) / kHeadRows);
  const int64_t grid = p.problem.s_q * head_groups;
  if (grid == 0) return {};
  if (grid > 0x7fffffff) {
    return unsupported("sm90a sparse prefill: s_q * head groups = " + std::to_string(grid) +
                       " exceeds the grid limit 2^31 - 1");
  }
  const int smem = sm90a_prefill_smem_bytes<kDqk>();
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(sm90a_sparse_prefill_kernel<kDqk>, smem));
  sm90a_sparse_prefill_kernel<kDqk>
      <<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, head_groups);
  return check_last_launch("sm90a_sparse_prefill_kernel");
}

}  // namespace sparse_mla::cuda::sm90a_prefill
