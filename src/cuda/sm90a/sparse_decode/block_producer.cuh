// The producer warpgroup of the Hopper decode's block schedule (block_config.cuh): it gathers a
// block's FP8 rows into registers, dequantises them and stores bf16 rows into the block's buffer,
// one block ahead of the consumers.
//
// Thread t (ProducerPlace: group g = t / 8, chunk c = t % 8) owns rows g + 16 r of every block
// (r 0-3; paired, CTA rank k only r = 2 k, 2 k + 1: rows 32 k .. 32 k + 31) and per row the e4m3
// units c + 8 k (16 values each; v4_fp8's 28 units leave k = 3 to c < 4), tail chunk c and the
// row's scales: eight threads read 128 contiguous bytes of a row per load. Per block:
//   0. the L2 prefetch of block + 2's rows (one thread per row of the CTA's share);
//   1. its rows' units, tail chunks and scales into registers (ld.global.nc; an invalid slot
//      loads nothing and holds zeros), then the next block's list entries;
//   2. the wait until both CTAs' consumers freed the buffer (its empty barrier), under which the
//      loads land;
//   3. each unit times its tile's scale, rounded once to bf16 (v32_fp8: any fp32 scale in fp32;
//      v4_fp8: the power of two as one bf16 multiply, cuda/device/fp8_dequant.cuh), into the
//      buffer's swizzled panels (st.shared; paired, also st.async into the peer's buffer, counted
//      on its full barrier), the tail as it is, the block's 64 validity flags;
//   4. the async-proxy fence and one arrival on the buffer's full barrier (paired, thread 0's
//      arrival also expects the peer's 32 rows).
#pragma once

#include <cstdint>

#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/sm90a/seesaw/producer_rows.cuh"
#include "cuda/sm90a/sparse_decode/block_config.cuh"
#include "cuda/sm90a/sparse_decode/kernel.cuh"  // Piece, BlockRows, CacheDividers, block_row

namespace sparse_mla::cuda::sm90a_block_decode {

using portable_decode::DecodeLaunch;
using sm90a::ProducerPlace;
using sm90a_decode::BlockRows;
using sm90a_decode::CacheDividers;
using sm90a_decode::Piece;

// A row's share of one producer thread, in registers.
template <class Traits>
struct RowRegs {
  static constexpr int kUnits = Traits::kQuantDims / 16;  // 16-B e4m3 units per row: 32 / 28
  static_assert(kUnits > 24 && kUnits <= 32, "units c + 8 k, k < 4, must cover the row");
  uint4 unit[4];  // units c + 8 k
  uint4 tail;     // bf16 tail chunk c
  uint4 scales;   // v32_fp8: the four fp32 scales; v4_fp8: the eight ue8m0 bytes in x, y
};

__device__ __forceinline__ uint4 load16_if(bool valid, const uint8_t* src) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0u, 0u, 0u, 0u);
}

template <class Traits>
__device__ __forceinline__ void load_row(const portable_decode::SlotRows& src, bool valid, int c,
                                         RowRegs<Traits>& r) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int u = c + 8 * k;
    r.unit[k] = load16_if(valid && u < RowRegs<Traits>::kUnits, src.data + 16 * u);
  }
  r.tail = load16_if(valid, src.data + Traits::kTailOffset + 16 * c);
  if constexpr (Traits::kScalesInRow) {
    static_assert(Traits::kNumScales == 4 && Traits::kScaleOffset % 16 == 0);
    r.scales = load16_if(valid, src.data + Traits::kScaleOffset);
  } else {
    static_assert(Traits::kScaleRowBytes == 8);
    const uint2 v = valid ? __ldg(reinterpret_cast<const uint2*>(src.scales)) : make_uint2(0u, 0u);
    r.scales = make_uint4(v.x, v.y, 0u, 0u);
  }
}

// Byte offset of 16-B chunk `chunk` of panel `panel`, row `row`, in a [64, d_qk] swizzled tile.
__device__ __forceinline__ uint32_t chunk_offset(int panel, int row, int chunk) {
  return panel * kPanelBytes + row * 128 + ((chunk ^ (row & 7)) << 4);
}

// Where the converted chunks go: this CTA's buffer and, paired, the peer's (st.async counted on
// the peer's full barrier of that buffer).
template <bool kPaired>
struct ChunkSink {
  uint8_t* tile;
  uint32_t peer_tile, peer_full;
  __device__ __forceinline__ void put(uint32_t offset, const uint4& v) const {
    *reinterpret_cast<uint4*>(tile + offset) = v;
    if constexpr (kPaired) ptx::st_async_16(peer_tile + offset, v, peer_full);
  }
};

// Row `row` of the block from the thread's registers: unit u = c + 8 k becomes chunks 2 (u % 4),
// +1 of fp8 panel u / 4 = 2 k + c / 4 times the scale of its tile (v32_fp8: tile 16 u / 128 = k;
// v4_fp8: 16 u / 64 = 2 k + c / 4). Threads c and c + 4 of a row write the same chunk column of
// two panels 8 KiB apart (the same banks): c >= 4 writes its upper chunk first, so the eight
// threads of a row's quarter-warp store hit eight different columns.
template <class Traits, bool kPaired>
__device__ __forceinline__ void store_row(const ChunkSink<kPaired>& sink, int row, int c,
                                          const RowRegs<Traits>& r) {
  const bool upper_first = c >= 4;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (c + 8 * k >= RowRegs<Traits>::kUnits) continue;
    const uint4& raw = r.unit[k];
    uint4 lo, hi;
    if constexpr (Traits::kScaleEncoding == ScaleEncoding::kFloat32) {
      const float scale = __uint_as_float(k == 0   ? r.scales.x
                                          : k == 1 ? r.scales.y
                                          : k == 2 ? r.scales.z
                                                   : r.scales.w);
      lo = dequant_e4m3x8(make_uint2(raw.x, raw.y), scale);
      hi = dequant_e4m3x8(make_uint2(raw.z, raw.w), scale);
    } else {
      const uint32_t bytes = k < 2 ? r.scales.x : r.scales.y;
      const uint32_t scale = ue8m0_to_bf16x2((bytes >> (8 * (2 * (k & 1) + (c >> 2)))) & 0xffu);
      lo = dequant_e4m3x8_pow2(make_uint2(raw.x, raw.y), scale);
      hi = dequant_e4m3x8_pow2(make_uint2(raw.z, raw.w), scale);
    }
    const int panel = 2 * k + (c >> 2), chunk = 2 * (c & 3);
    sink.put(chunk_offset(panel, row, chunk + (upper_first ? 1 : 0)), upper_first ? hi : lo);
    sink.put(chunk_offset(panel, row, chunk + (upper_first ? 0 : 1)), upper_first ? lo : hi);
  }
  sink.put(chunk_offset(Traits::kQuantDims / 64, row, c), r.tail);
}

template <class Traits, bool kPaired>
__device__ __forceinline__ void produce(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int head0, int t,
                                        BlockSmem<Traits::kDqk>& sm) {
  constexpr int kDqk = Traits::kDqk;
  // Rows g + 16 r, r in [first_r, first_r + 2 kRounds): paired one round of two rows (the CTA's
  // half of the block), else two. A round's loads are in flight together; unpaired, the second
  // round's are issued after the first round's stores (the producer's 136 registers hold two
  // rows' 48 registers of data, not four).
  constexpr int kRounds = kPaired ? 1 : 2;
  const detail::DecodeParams& p = launch.p;
  const ProducerPlace at(t);
  const CacheDividers div(p);
  const uint32_t rank = kPaired ? ptx::cluster_ctarank() : 0u;
  const int first_r = static_cast<int>(2 * rank);
  const uint32_t peer_kv = kPaired ? ptx::map_shared_to_rank(smem_u32(sm.kv[0]), rank ^ 1u) : 0u;
  const uint32_t peer_full =
      kPaired ? ptx::map_shared_to_rank(smem_u32(&sm.full[0]), rank ^ 1u) : 0u;
  uint32_t block_count = 0;  // blocks of the CTA's earlier pieces: buffer block_count % 2
  uint32_t item = 0;
  for (int32_t query = part.begin_query; query <= part.end_query; ++query, ++item) {
    const Piece w(p, part, query);
    const int num_blocks = w.end > w.begin ? w.end - w.begin : 0;
    BlockRows rows = sm90a_decode::block_rows(w, at, w.begin);
    // Q once the consumers' last scores of the previous piece are done.
    if (item > 0) ptx::mbarrier_wait_parity(smem_u32(&sm.q_empty), (item - 1) & 1);
    const uint8_t* q =
        reinterpret_cast<const uint8_t*>(p.q + w.b * p.q_stride_b + w.s * p.q_stride_s);
    sm90a::copy_rows<0, kDqk / 64>(smem_u32(sm.q), at, [&](int r, bool* valid) {
      const int head = head0 + at.group + 16 * r;
      *valid = head < p.problem.h_q;
      return q + (*valid ? head : 0) * p.q_stride_h * 2;
    });
    ptx::cp_async_mbarrier_arrive_noinc(smem_u32(&sm.q_full));
    // The L2 prefetch two blocks ahead: one thread per row of the CTA's share (rows
    // 32 rank + t paired, t unpaired) loads the row's list entry of block i + 2 during block
    // i - 1 and prefetches its whole data row (and v4_fp8's scale row) during block i, so that
    // block i + 2's register loads find L2, not HBM. A piece's first two blocks are not
    // prefetched.
    const bool prefetcher = t < kRounds * 32;
    const int ahead_row = kPaired ? static_cast<int>(32 * rank) + t : t;
    int32_t ahead = prefetcher ? sm90a_decode::list_entry(w, w.begin + 2, ahead_row) : -1;
    for (int i = 0; i < num_blocks; ++i, ++block_count) {
      const int b = static_cast<int>(block_count & 1);
      const uint32_t use = block_count >> 1;
      if (prefetcher) {
        sm90a_decode::prefetch_slot<Traits>(p, div, w, w.begin + i + 2, ahead);
        ahead = sm90a_decode::list_entry(w, w.begin + i + 3, ahead_row);
      }
      const ChunkSink<kPaired> sink{sm.kv[b], peer_kv + b * kTileBytes<kDqk>, peer_full + 8 * b};
      bool valid[4];
      BlockRows next_rows = rows;
#pragma unroll
      for (int round = 0; round < kRounds; ++round) {
        // Two rows per round in registers: rows g + 16 r, r = first_r + 2 round, + 1.
        RowRegs<Traits> regs[2];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const bool own = r / 2 == first_r / 2 + round;
          if (round > 0 && !own) continue;
          bool ok;
          const portable_decode::SlotRows src =
              sm90a_decode::block_row<Traits>(p, div, rows, r, &ok);
          if (round == 0) valid[r] = ok;
          if (own) load_row<Traits>(src, ok, at.chunk, regs[r & 1]);
        }
        if (round == 0) {
          if (i + 1 < num_blocks) next_rows = sm90a_decode::block_rows(w, at, w.begin + i + 1);
          // Paired, the peer's consumers arrive here too (relaxed: they only say they are done
          // reading), so a CTA-scope wait is enough; a cluster-scope acquire would add an L1
          // invalidation (CCTL.IVALL) per block.
          if (use > 0) ptx::mbarrier_wait_parity(smem_u32(&sm.empty[b]), (use - 1) & 1);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          store_row<Traits, kPaired>(sink, at.group + 16 * (first_r + 2 * round + r), at.chunk,
                                     regs[r]);
        }
      }
      rows = next_rows;
      if (at.chunk == 0) {
#pragma unroll
        for (int r = 0; r < 4; ++r) sm.valid[b][at.group + 16 * r] = valid[r] ? 1 : 0;
      }
      ptx::fence_proxy_async_shared();
      const uint32_t full = smem_u32(&sm.full[b]);
      if (kPaired && t == 0) {
        ptx::mbarrier_arrive_expect_tx(full, kPeerBlockBytes<kDqk>);
      } else {
        ptx::mbarrier_arrive(full);
      }
    }
  }
  // Every Q copy has landed before the producer leaves.
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}

}  // namespace sparse_mla::cuda::sm90a_block_decode
