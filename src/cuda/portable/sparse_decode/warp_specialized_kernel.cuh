// Warp-specialised split kernel of the portable (sm_80+) sparse decode for <= 16 heads and the
// FP8 caches (SPEC §3): the 16-row x 32-key register-Q tile of kernel.cuh, with its gather and
// dequantisation moved out of the MMA warps. Grid (num_parts, head groups of 16: 1 for <= 16
// heads, more only where a small shared memory makes the tile choice fall back to 16 rows),
// 512 threads, 1 CTA per SM:
//   warps 0..7   consumers: the register-Q core (register_q_core.cuh) over a ring of kStages bf16
//                tiles, synchronised with named barriers over their own 8 warps only;
//   warps 8..15  producers, two groups of 4 warps: group g fills the tiles of the part's blocks
//                j = g, g + 2, g + 4, ... (ring slot j % kStages): it resolves the block's 32 row
//                addresses, loads the FP8 bytes and scales straight into registers (no raw
//                shared-memory stage, as FlashMLA's producer warp group), waits for the slot to be
//                free, converts (exact fp32 scale products, one rounding, fp8_dequant.cuh) and
//                stores the bf16 chunks, then signals the slot full.
// Hand-offs per slot s: full(s) = bar.arrive by the filling group's 128 threads + bar.sync by the
// 256 consumer threads; empty(s) = bar.arrive by the consumers after their P.V + bar.sync by the
// group before it overwrites the slot (skipped for a slot's first fill). Each group drains the
// empty arrivals of its last fills before it exits, so every barrier ends complete.
// Why (docs/kernels/portable_sparse_decode.md, "Session 14"): in kernel.cuh the same 8 warps
// gather, dequantise and multiply between CTA barriers, and 16 heads stayed at 0.54x the 64-head
// time at V3.2 b = 64; here each block's QK^T / softmax / P.V chain overlaps the loads and
// conversions of the next blocks. Registers: 512 threads x 128 = the whole file on sm_80..sm_90,
// with no setmaxnreg, so one source serves every card; the consumers run the register-Q core at
// the same 128-register cap as the split kernel's 2-CTA launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/ptx/ld_global.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/piece_inputs.cuh"
#include "cuda/portable/sparse_decode/piece_target.cuh"
#include "cuda/portable/sparse_decode/register_q_core.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::portable_decode {

// Roles and barrier ids. Ids 1 and 2 are the register-Q core's exchange barriers (1 + key half).
struct WarpRoles {
  static constexpr int kConsumerThreads = 256;  // the register-Q core's 8 warps
  static constexpr int kGroupThreads = 128;     // one producer group: 4 warps
  static constexpr int kThreads = kConsumerThreads + 2 * kGroupThreads;
  static constexpr int kHandOffThreads = kConsumerThreads + kGroupThreads;  // full / empty
  static constexpr int kConsumerBarrier = 3;
  __device__ __forceinline__ static int group_barrier(int group) { return 4 + group; }
};

// The barrier over the consumers' 8 warps (RegisterQCore's Barrier).
struct ConsumerBarrier {
  __device__ __forceinline__ static void sync() {
    ptx::named_barrier_sync(WarpRoles::kConsumerBarrier, WarpRoles::kConsumerThreads);
  }
};

template <class Shape, class Traits, int kStagesValue>
struct WarpSpecializedSmem {
  static constexpr int kStages = kStagesValue;  // ring slots; even: slot s is filled by group s % 2
  static constexpr int kScaleRows = Traits::kScalesInRow ? 1 : Shape::kBlockKeys;
  static_assert(kStages % 2 == 0 && 6 + 2 * kStages <= 16, "16 named barriers per CTA");

  alignas(1024) uint8_t q[Shape::kQBytes];                 // [16, d_qk] bf16; then the exchange
  alignas(1024) uint8_t kv[kStages][Shape::kKvTileBytes];  // ring of [32, d_qk] bf16 tiles
  alignas(1024) uint8_t p[Shape::kPBytes];                 // [16, 64] bf16, swizzled
  float red_max[Shape::kKeyGroups * Shape::kRows];         // [4, 16]
  float red_sum[Shape::kKeyGroups * Shape::kRows];         // [4, 16]
  uint8_t valid[kStages][Shape::kBlockKeys];               // per slot: key validity (consumers)
  // Per producer group, double-buffered by the group's fill count: the block's row addresses and
  // the bit mask of its valid rows, written by the group's first warp.
  const uint8_t* row_ptr[2][2][Shape::kBlockKeys];
  const uint8_t* scale_ptr[2][2][kScaleRows];
  uint32_t valid_mask[2][2];

  __device__ __forceinline__ static int full_barrier(int slot) { return 6 + slot; }
  __device__ __forceinline__ static int empty_barrier(int slot) { return 6 + kStages + slot; }
};

// Ring slots: 2 fit every sm_80+ card's shared memory (sizeof, printed on the host).
inline constexpr int kWarpSpecializedStages = 2;

// One producer thread's share of a block, loaded before the slot is free: thread t of a group owns
// 16-B tile chunk c = t % 64 of rows t / 64 + 2 i (i < 16), and (v32_fp8) 2 of the 256 tail
// chunks 64..71. An e4m3 chunk is {8 bytes, scale bits} in .x .y .z; a bf16 tail chunk (v4_fp8's
// chunks 56..63) the whole uint4, so both kinds share one register array.
template <class Traits>
struct ProducerShare {
  static constexpr int kRowsPerThread = 16;
  static constexpr int kQuantChunks = Traits::kQuantDims / 8;  // 64 (v32_fp8) or 56 (v4_fp8)
  static constexpr int kLateChunks = Traits::kDqk / 8 - 64;    // tail chunks past 64: 8 or 0
  static constexpr int kLateUnits = 32 * kLateChunks / 128;    // per thread: 2 or 0
  uint4 chunk[kRowsPerThread];
  uint4 late[kLateUnits > 0 ? kLateUnits : 1];
};

// load: group thread `t`'s chunks of the block whose rows are row_ptr / scale_ptr (every row
// pointer is in bounds: invalid slots point at slot 0; convert_and_store zero-fills them).
template <class Shape, class Traits>
__device__ __forceinline__ void load_share(int t, const uint8_t* const* row_ptr,
                                           const uint8_t* const* scale_ptr,
                                           ProducerShare<Traits>& share) {
  using Share = ProducerShare<Traits>;
  const int chunk = t % 64, row0 = t / 64;
  if (chunk < Share::kQuantChunks) {
#pragma unroll
    for (int i = 0; i < Share::kRowsPerThread; ++i) {
      const int row = row0 + 2 * i;
      const uint2 bytes = ptx::ld_global_nc_v2(row_ptr[row] + 8 * chunk);
      uint32_t scale_bits;
      if constexpr (Traits::kScaleEncoding == ScaleEncoding::kFloat32) {
        scale_bits = __float_as_uint(ptx::ld_global_nc_f32(
            row_ptr[row] + Traits::kScaleOffset + 4 * (chunk * 8 / Traits::kTileSize)));
      } else {
        scale_bits = __ldg(scale_ptr[row] + chunk * 8 / Traits::kTileSize);
      }
      share.chunk[i] = make_uint4(bytes.x, bytes.y, scale_bits, 0u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < Share::kRowsPerThread; ++i) {
      share.chunk[i] = ptx::ld_global_nc_v4(row_ptr[row0 + 2 * i] + Traits::kTailOffset +
                                            16 * (chunk - Share::kQuantChunks));
    }
  }
  if constexpr (Share::kLateUnits > 0) {
#pragma unroll
    for (int k = 0; k < Share::kLateUnits; ++k) {
      const int u = t + 128 * k;
      share.late[k] = ptx::ld_global_nc_v4(row_ptr[u / Share::kLateChunks] + Traits::kTailOffset +
                                           16 * (u % Share::kLateChunks));
    }
  }
}

// dequantise + store: the share into `tile` (swizzled [32, d_qk] bf16), as kernel.cuh's
// dequantize_block: every address a per-thread base plus a compile-time offset. kMasked: rows
// whose bit in `rows_valid` (bit r = row r) is clear are stored as zeros (a block with invalid
// slots: the row read was slot 0's, which may hold anything).
template <class Shape, class Traits, bool kMasked>
__device__ __forceinline__ void convert_and_store(int t, const ProducerShare<Traits>& share,
                                                  uint8_t* tile, uint32_t rows_valid) {
  using Share = ProducerShare<Traits>;
  const int chunk = t % 64, row0 = t / 64;
  const uint32_t column_base =
      static_cast<uint32_t>((chunk >> 3) * (Shape::kBlockKeys * 128) + row0 * 128);
  const uint32_t swizzle = static_cast<uint32_t>(((chunk & 7) ^ row0) << 4);
  const uint32_t own_rows = rows_valid >> row0;  // bit 2 i: row row0 + 2 i
  auto store = [&](int i, uint4 value) {
    if constexpr (kMasked) {
      if (((own_rows >> (2 * i)) & 1u) == 0u) value = make_uint4(0u, 0u, 0u, 0u);
    }
    *reinterpret_cast<uint4*>(tile + column_base + 256 * i +
                              (swizzle ^ static_cast<uint32_t>(((2 * i) & 7) << 4))) = value;
  };
  if (chunk < Share::kQuantChunks) {
#pragma unroll
    for (int i = 0; i < Share::kRowsPerThread; ++i) {
      const uint4 c = share.chunk[i];
      float scale;
      if constexpr (Traits::kScaleEncoding == ScaleEncoding::kFloat32) {
        scale = __uint_as_float(c.z);
      } else {
        scale = ue8m0_to_float(c.z);
      }
      store(i, dequant_e4m3x8(make_uint2(c.x, c.y), scale));
    }
  } else {
#pragma unroll
    for (int i = 0; i < Share::kRowsPerThread; ++i) store(i, share.chunk[i]);
  }
  if constexpr (Share::kLateUnits > 0) {
#pragma unroll
    for (int k = 0; k < Share::kLateUnits; ++k) {
      const int u = t + 128 * k;
      const int row = u / Share::kLateChunks;
      uint4 value = share.late[k];
      if constexpr (kMasked) {
        if (((rows_valid >> row) & 1u) == 0u) value = make_uint4(0u, 0u, 0u, 0u);
      }
      *reinterpret_cast<uint4*>(
          tile + tile_chunk_offset<Shape::kBlockKeys>(row, 64 + u % Share::kLateChunks)) = value;
    }
  }
}

// Calls f(lists, block, j) for every block of the part in order (j counts from 0); returns the
// number of blocks.
template <class Shape, class BlockFn>
__device__ __forceinline__ int for_each_part_block(const DecodeLaunch& launch,
                                                   const planning::DecodePartSchedule& part,
                                                   BlockFn f) {
  const int64_t s_q = launch.p.problem.s_q;
  int j = 0;
  for (int32_t query = part.begin_query; query <= part.end_query; ++query) {
    const QueryLists lists = query_lists<Shape::kBlockKeys>(launch.p, query / s_q, query % s_q);
    const int block_begin = query == part.begin_query ? part.begin_block : 0;
    const int block_end = query == part.end_query ? part.end_block : lists.blocks_total;
    for (int block = block_begin; block < block_end; ++block) f(lists, block, j++);
  }
  return j;
}

// Producer group `group` (thread t of 128): fills slots j % kStages for the part's blocks j with
// j % 2 == group.
template <class Shape, class Traits, class Smem>
__device__ __forceinline__ void produce(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int group, int t,
                                        Smem& sm) {
  const detail::DecodeParams& p = launch.p;
  int fills = 0;
  const int blocks = for_each_part_block<Shape>(launch, part, [&](const QueryLists& lists,
                                                                  int block, int j) {
    if (j % 2 != group) return;
    const int buf = fills & 1;
    const int slot = j % Smem::kStages;
    // load (addresses): the group's first warp, one slot per lane.
    bool lane_valid = false;
    if (t < 32) {
      const int32_t index = slot_index<Shape>(lists, block, t);
      const detail::KvCacheParams& cache = block < lists.blocks_main ? p.cache : p.extra_cache;
      lane_valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
      const SlotRows rows =
          slot_rows<Traits>(cache, lane_valid ? static_cast<uint32_t>(index) : 0u);
      sm.row_ptr[group][buf][t] = rows.data;
      if constexpr (!Traits::kScalesInRow) sm.scale_ptr[group][buf][t] = rows.scales;
      const uint32_t mask = __ballot_sync(0xffffffffu, lane_valid);
      if (t == 0) sm.valid_mask[group][buf] = mask;
    }
    ptx::named_barrier_sync(WarpRoles::group_barrier(group), WarpRoles::kGroupThreads);
    ProducerShare<Traits> share;
    load_share<Shape, Traits>(t, sm.row_ptr[group][buf], sm.scale_ptr[group][buf], share);
    const uint32_t rows_valid = sm.valid_mask[group][buf];
    // The slot's previous block (j - kStages) is done once the consumers arrive on empty.
    if (j >= Smem::kStages) {
      ptx::named_barrier_sync(Smem::empty_barrier(slot), WarpRoles::kHandOffThreads);
    }
    if (rows_valid == 0xffffffffu) {
      convert_and_store<Shape, Traits, false>(t, share, sm.kv[slot], rows_valid);
    } else {
      convert_and_store<Shape, Traits, true>(t, share, sm.kv[slot], rows_valid);
    }
    if (t < 32) sm.valid[slot][t] = lane_valid ? 1 : 0;
    ptx::named_barrier_arrive(Smem::full_barrier(slot), WarpRoles::kHandOffThreads);
    ++fills;
  });
  // Drain: the consumers arrive on empty after every block; the arrivals of the last kStages
  // blocks have no later fill to consume them.
  for (int j = blocks > Smem::kStages ? blocks - Smem::kStages : 0; j < blocks; ++j) {
    if (j % 2 == group) {
      ptx::named_barrier_sync(Smem::empty_barrier(j % Smem::kStages), WarpRoles::kHandOffThreads);
    }
  }
}

// The consumers (threads 0..255): per piece, Q into registers, then every block of the ring
// through the register-Q core, then the piece's store (kernel.cuh's loop without its gather and
// dequantisation).
template <class Shape, class Smem>
__device__ __forceinline__ void consume(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int head0,
                                        int thread, Smem& sm) {
  using Core = RegisterQCore<Shape, ConsumerBarrier>;
  const detail::DecodeParams& p = launch.p;
  const typename Core::Place w = Core::place(thread);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const int64_t s_q = p.problem.s_q;
  int j = 0;
  for (int32_t query = part.begin_query; query <= part.end_query; ++query) {
    const int64_t b = query / s_q, s = query % s_q;
    const QueryLists lists = query_lists<Shape::kBlockKeys>(p, b, s);
    const int block_begin = query == part.begin_query ? part.begin_block : 0;
    const int block_end = query == part.end_query ? part.end_block : lists.blocks_total;
    ConsumerBarrier::sync();  // the previous piece is done with Q (the exchange) and red_sum
    typename Core::Accum acc;
    acc.reset();
    if (block_begin < block_end) {
      load_q<Shape>(p, b, s, head0, thread, sm);
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
      ConsumerBarrier::sync();
      Core::begin_piece(sm, w, acc);
    }
    for (int block = block_begin; block < block_end; ++block, ++j) {
      const int slot = j % Smem::kStages;
      ptx::named_barrier_sync(Smem::full_barrier(slot), WarpRoles::kHandOffThreads);
      Core::process_block(sm, smem_u32(sm.kv[slot]), sm.valid[slot], scale_log2, w, acc);
      ptx::named_barrier_arrive(Smem::empty_barrier(slot), WarpRoles::kHandOffThreads);
    }
    Core::store(sm, PieceTarget{&launch, b, s, planning::piece_partial_slot(part, query,
                                                                            launch.split_offsets),
                                head0},
                w, acc);
  }
}

template <class Shape, class Traits, int kStages>
__global__ void __launch_bounds__(WarpRoles::kThreads, 1)
    warp_specialized_decode_kernel(const DecodeLaunch launch) {
  using Smem = WarpSpecializedSmem<Shape, Traits, kStages>;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& sm = *reinterpret_cast<Smem*>(smem_bytes);
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int thread = threadIdx.x;
  if (thread < WarpRoles::kConsumerThreads) {
    consume<Shape>(launch, part, static_cast<int>(blockIdx.y) * Shape::kRows, thread, sm);
  } else {
    const int t = thread - WarpRoles::kConsumerThreads;
    produce<Shape, Traits>(launch, part, t / WarpRoles::kGroupThreads,
                           t % WarpRoles::kGroupThreads, sm);
  }
}

template <KvCacheFormat kFormat, int kDqk>
using WarpSpecializedKernelSmem =
    WarpSpecializedSmem<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>, kWarpSpecializedStages>;

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_smem_bytes() {
  return static_cast<int>(sizeof(WarpSpecializedKernelSmem<kFormat, kDqk>));
}

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_ctas_per_sm() {
  auto kernel = warp_specialized_decode_kernel<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>,
                                               kWarpSpecializedStages>;
  const int smem = warp_specialized_decode_smem_bytes<kFormat, kDqk>();
  int ctas = 0;
  if (ensure_max_dynamic_smem(kernel, smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, WarpRoles::kThreads, smem) !=
          cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ctas;
}

template <KvCacheFormat kFormat, int kDqk>
Status launch_warp_specialized_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  auto kernel = warp_specialized_decode_kernel<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>,
                                               kWarpSpecializedStages>;
  const int smem = warp_specialized_decode_smem_bytes<kFormat, kDqk>();
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  const dim3 grid(static_cast<unsigned>(launch.num_parts),
                  static_cast<unsigned>(decode_head_groups(launch.p.problem.h_q, 16)));
  kernel<<<grid, WarpRoles::kThreads, smem, stream>>>(launch);
  return check_last_launch("warp_specialized_decode_kernel");
}

}  // namespace sparse_mla::cuda::portable_decode
