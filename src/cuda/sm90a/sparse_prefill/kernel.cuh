// Hopper (sm_90a) sparse prefill kernel (SPEC §2; design in config.cuh and
// docs/kernels/sm90a_sparse_prefill.md). Grid: one CTA per SM (persistent), walking the work items
// (query token, 64-head group) = token * head_groups + group from blockIdx.x in steps of
// gridDim.x; the ring and its barriers carry over from item to item. Roles, per item:
//   producer   Q once the consumers' last scores of the previous item are done, then per pair of
//              64-slot blocks (K0, K1) four half-stages in the order the
//              consumers free them: wait until free, cp.async the rows (invalid slots zero-filled
//              from row 0, never read), write the block's validity with its first half, arrive on
//              the half's full barrier when the copies land;
//   consumers  the seesaw: WG0 scores K0, WG1 scores K1; each accumulates its output half over
//              both blocks, its own P from registers and the peer's from a P tile, the two row
//              maxima exchanged so both P share the pair's running max;
//   store      out (sink applied) from the accumulators in 16-B stores (quad_transpose),
//              max_logits and lse in natural log by WG0.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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
#include "cuda/knobs.h"
#include "cuda/prefill/token_slots.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/device_limits.h"
#include "cuda/runtime/dynamic_smem.h"
#include "cuda/sm90a/seesaw/consumers.cuh"
#include "cuda/sm90a/seesaw/cta.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"
#include "cuda/sm90a/sparse_prefill/config.cuh"
#include "cuda/sm90a/sparse_prefill/launch.h"

namespace sparse_mla::cuda::sm90a_prefill {

// ---- producer ------------------------------------------------------------------------------

// The thread's four list entries of block `block`, -1 past the list (k >= n_valid, topk_length;
// blocks past the list are all invalid). Raw: range-checked only where they are used, so that the
// loads issued a pair ahead are not waited for when issued. Indices, not addresses: the producer
// holds two blocks' rows in its 72 registers.
struct BlockRows {
  int32_t index[4];
};

__device__ __forceinline__ BlockRows block_rows(const prefill::TokenSlots& slots,
                                                const ProducerPlace& at, int block) {
  BlockRows rows;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    // < 2^32: block * 64 + 63 <= topk + 126 and topk <= INT32_MAX.
    const uint32_t k = static_cast<uint32_t>(block) * kBlockKeys + at.group + 16 * r;
    rows.index[r] = k < static_cast<uint64_t>(slots.n_valid) ? __ldg(slots.indices + k) : -1;
  }
  return rows;
}

// One half-stage of the CTA's ring pair `ring_pair` (its pairs counted over all its work items):
// wait until its readers freed it, then (the index loads had the wait to land) check the slots
// (valid iff 0 <= index < s_kv), write the stage's validity flags with its first half, copy, and
// arrive on its full barrier when the copies land.
template <int kDqk, int kStage, int kHalf, class SmemT>
__device__ __forceinline__ void produce_half(const detail::PrefillParams& p, const BlockRows& rows,
                                             const ProducerPlace& at, uint32_t ring_pair,
                                             bool writes_flags, SmemT& sm) {
  constexpr int kBarrier = 2 * kStage + kHalf;
  if (ring_pair > 0) {
    ptx::mbarrier_wait_parity(smem_u32(&sm.empty[kBarrier]), (ring_pair - 1) & 1);
  }
  const uint8_t* kv = reinterpret_cast<const uint8_t*>(p.kv);
  auto row_source = [&](int r, bool* valid) {
    *valid = rows.index[r] >= 0 && rows.index[r] < p.problem.s_kv;
    return kv + (*valid ? static_cast<int64_t>(rows.index[r]) * p.kv_stride_s * 2 : 0);
  };
  if (writes_flags && at.chunk == 0) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      bool valid;
      row_source(r, &valid);
      sm.valid[kStage][at.group + 16 * r] = valid ? 1 : 0;
    }
  }
  const uint32_t full = smem_u32(&sm.full[kBarrier]);
  if constexpr (kHalf == 0) {
    copy_rows<0, kLeftPanels>(smem_u32(sm.kv[kStage]), at, row_source);
  } else {
    copy_rows<kLeftPanels, kDqk / 64>(smem_u32(sm.kv[kStage]), at, row_source);
  }
  ptx::cp_async_mbarrier_arrive_noinc(full);
  if (at.chunk == 0) ptx::mbarrier_arrive(full);
}

// The CTA's work items: item = token * head_groups + group, from blockIdx.x in steps of gridDim.x
// (a persistent grid of one CTA per SM). Both roles walk them in the same order.
struct WorkItem {
  int64_t token;
  int head0;
  prefill::TokenSlots slots;
  int num_pairs;
  __device__ __forceinline__ WorkItem(const detail::PrefillParams& p, int head_groups, int64_t item)
      : token(item / head_groups),
        head0(static_cast<int>(item % head_groups) * kHeadRows),
        slots(prefill::token_slots<kBlockKeys>(p, token)),
        num_pairs((slots.num_blocks + 1) / 2) {}
};

// SmemT: the seesaw's plan, or the heads-in-N prefill's (heads_in_n_kernel.cuh), whose Q tile
// has SmemT::kQRows rows and panels SmemT::kQPanelBytes apart.
template <int kDqk, class SmemT>
__device__ __forceinline__ void produce(const detail::PrefillParams& p, int head_groups,
                                        int64_t num_items, int t, SmemT& sm) {
  const ProducerPlace at(t);
  uint32_t ring_pairs = 0;  // pairs of the items before this one: the ring's phase
  uint32_t item_count = 0;
  for (int64_t item = blockIdx.x; item < num_items; item += gridDim.x, ++item_count) {
    const WorkItem w(p, head_groups, item);
    // Each pair's list entries are loaded while the previous pair's halves are still being freed.
    BlockRows k0 = block_rows(w.slots, at, 0);
    BlockRows k1 = block_rows(w.slots, at, 1);
    // The item's Q once the consumers' last scores of the previous item are done: it lands while
    // they finish that item's products and store its output.
    if (item_count > 0) ptx::mbarrier_wait_parity(smem_u32(&sm.q_empty), (item_count - 1) & 1);
    const uint8_t* token_q = reinterpret_cast<const uint8_t*>(p.q + w.token * p.q_stride_s);
    static_assert(SmemT::kQRows % 16 == 0 && SmemT::kQRows <= kHeadRows);
    copy_rows<0, kDqk / 64, SmemT::kQRows / 16, SmemT::kQPanelBytes>(
        smem_u32(sm.q), at, [&](int r, bool* valid) {
          const int head = w.head0 + at.group + 16 * r;
          *valid = head < p.problem.h_q;
          return token_q + (*valid ? head : 0) * p.q_stride_h * 2;
        });
    ptx::cp_async_mbarrier_arrive_noinc(smem_u32(&sm.q_full));
    for (int pair = 0; pair < w.num_pairs; ++pair) {
      // The order the consumers free the halves in (see consume).
      const uint32_t ring_pair = ring_pairs + pair;
      produce_half<kDqk, 0, 0>(p, k0, at, ring_pair, true, sm);
      produce_half<kDqk, 1, 1>(p, k1, at, ring_pair, true, sm);
      produce_half<kDqk, 0, 1>(p, k0, at, ring_pair, false, sm);
      if (pair + 1 < w.num_pairs) k0 = block_rows(w.slots, at, 2 * pair + 2);
      produce_half<kDqk, 1, 0>(p, k1, at, ring_pair, false, sm);
      if (pair + 1 < w.num_pairs) k1 = block_rows(w.slots, at, 2 * pair + 3);
    }
    ring_pairs += w.num_pairs;
  }
  // Every copy has landed before the producer exits.
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}

// ---- consumers (cuda/sm90a/seesaw/consumers.cuh), the item's store -----------------------

// The item's output: row sums over both warpgroups' keys (through row_sum, one of two buffers by
// item parity: the peer may still read the previous item's), the output scale with the sink; out
// from the accumulators, max_logits and lse in natural log by WG0, max_logits from both
// warpgroups' true maxima (WG1's through row_max_peer, given only for an item with pairs: see
// publish_row_sums; a row of an item without pairs is empty and reads none). A quad holds 8
// consecutive columns of a row per accumulator slice (4 B per lane); quad_transpose turns 4 slices
// into 16 consecutive bytes per lane, so each 16-B store fills whole 32-B sectors (16 STG.128 per
// thread where 64 STG.32 wrote half sectors; ncu at d512 h64 topk 512: the 4-B stores held 16 % of
// the consumers' stall samples, LSU-throttled). out rows are 16-B aligned (core/validate).
__device__ __forceinline__ void store_item(const detail::PrefillParams& p, int64_t token, int head0,
                                           bool has_pairs, const ConsumerPlace& at, RowState& st,
                                           const float (&o)[128], float (&row_sum)[2][kHeadRows],
                                           float (&row_max_peer)[kHeadRows]) {
  const float(&m)[2] = st.m;
  publish_row_sums(at, st, row_sum, has_pairs ? row_max_peer : nullptr);
  const int quad_lane = at.lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Every lane runs the transposes (their shuffles name the whole warp); rows past h_q store
    // nothing and read no sink.
    const int head = head0 + at.row[h];
    const bool live = head < p.problem.h_q;
    const float l_total = row_sum[0][at.row[h]] + row_sum[1][at.row[h]];
    float scale = 0.0f;
    if (live && l_total > 0.0f) {
      const float* sink =
          p.attn_sink != nullptr ? p.attn_sink + head * p.attn_sink_stride : nullptr;
      scale = output_scale(m[h], l_total, sink);
    }
    uint16_t* out_row =
        p.out + token * p.out_stride_s + static_cast<int64_t>(head) * p.out_stride_h + 256 * at.wg;
#pragma unroll
    for (int group = 0; group < 8; ++group) {  // accumulator slices 4 group .. 4 group + 3
      uint32_t v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * (4 * group + k) + 2 * h;
        v[k] = ptx::pack_bf16x2(o[i] * scale, o[i + 1] * scale);
      }
      quad_transpose(v, quad_lane);
      if (live) {
        *reinterpret_cast<uint4*>(out_row + 8 * (4 * group + quad_lane)) =
            make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
    if (live && at.wg == 0 && quad_lane == 0) {
      const bool empty = !(l_total > 0.0f);
      p.lse[token * p.lse_stride_s + head * p.lse_stride_h] =
          empty ? INFINITY : (m[h] + log2f(l_total)) * kLn2;
      p.max_logits[token * p.max_logits_stride_s + head * p.max_logits_stride_h] =
          empty ? -INFINITY : fmaxf(st.max[h], row_max_peer[at.row[h]]) * kLn2;
    }
  }
}

template <int kDqk>
__device__ __forceinline__ void consume(const detail::PrefillParams& p, int head_groups,
                                        int64_t num_items, int t, Smem<kDqk>& sm) {
  const ConsumerPlace at(t);
  const float scale_log2 = p.sm_scale * kLog2e;
  const uint32_t q = smem_u32(sm.q);
  uint8_t* p1_tile = sm.p[0];
  uint8_t* p0_tile = kDqk == 576 ? sm.kv[0] + 8 * kPanelBytes : sm.p[kOwnPTiles<kDqk> - 1];
  uint32_t ring_pairs = 0;  // as the producer's
  uint32_t item_count = 0;
  for (int64_t item = blockIdx.x; item < num_items; item += gridDim.x, ++item_count) {
    const WorkItem w(p, head_groups, item);
    float o[128];
    RowState st;
    consume_item_pairs<kDqk>(q, p0_tile, p1_tile, at, scale_log2, w.num_pairs, ring_pairs,
                             item_count, sm, st, o);
    ring_pairs += w.num_pairs;
    store_item(p, w.token, w.head0, w.num_pairs > 0, at, st, o, sm.row_sum[item_count & 1],
               sm.row_max[1]);
  }
}

template <int kDqk>
__global__ void __launch_bounds__(kThreads, 1)
    sm90a_sparse_prefill_kernel(const detail::PrefillParams p, int head_groups, int64_t num_items) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  Smem<kDqk>& sm = set_up_seesaw_cta<kDqk>(smem_raw, kFullArrivals);
  const int thread = threadIdx.x;

  if (thread >= kConsumerThreads) {
    ptx::setmaxnreg_dec<kProducerRegs>();
    produce<kDqk>(p, head_groups, num_items, thread - kConsumerThreads, sm);
  } else {
    ptx::setmaxnreg_inc<kConsumerRegs>();
    consume<kDqk>(p, head_groups, num_items, thread, sm);
  }
#else
  __trap();
#endif
}

template <int kDqk>
inline constexpr int kSeesawPrefillSmemBytes = static_cast<int>(sizeof(Smem<kDqk>)) + 1024;

// A persistent grid, one CTA per SM (no more than there are items, SMLA_PREFILL_SM90A_CTAS caps
// it): each CTA walks its items with the ring and the barriers carried over, so an item's Q and
// first rows load under the previous item's last products and output. 0 for no items.
inline Status persistent_prefill_grid(const detail::PrefillParams& p, int64_t num_items,
                                      int64_t* grid) {
  *grid = 0;
  if (num_items == 0) return {};
  DeviceLimits limits;
  std::string why_not;
  if (!device_limits(p.problem.device.index, &limits, &why_not)) {
    return unsupported("sm90a sparse prefill: " + why_not);
  }
  const int64_t ctas = cuda_knobs().prefill_sm90a_ctas.value.value_or(limits.sm_count);
  *grid = std::min<int64_t>(num_items, ctas);
  return {};
}

// The seesaw prefill: items of (token, 64-head group).
template <int kDqk>
Status launch_seesaw_prefill(const detail::PrefillParams& p, cudaStream_t stream) {
  const int head_groups = static_cast<int>((p.problem.h_q + kHeadRows - 1) / kHeadRows);
  const int64_t num_items = p.problem.s_q * head_groups;
  int64_t grid;
  SMLA_RETURN_IF_ERROR(persistent_prefill_grid(p, num_items, &grid));
  if (grid == 0) return {};
  constexpr int smem = kSeesawPrefillSmemBytes<kDqk>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(sm90a_sparse_prefill_kernel<kDqk>, smem));
  sm90a_sparse_prefill_kernel<kDqk>
      <<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, head_groups, num_items);
  return check_last_launch("sm90a_sparse_prefill_kernel");
}

}  // namespace sparse_mla::cuda::sm90a_prefill
