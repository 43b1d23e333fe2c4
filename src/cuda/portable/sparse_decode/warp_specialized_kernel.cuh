// Warp-specialised split kernel of the portable (sm_80+) sparse decode for <= 16 heads and the
// FP8 caches (SPEC §3): the 16-row x 32-key register-Q tile of kernel.cuh, with its gather and
// dequantisation moved out of the MMA warps. Grid (num_parts, head groups of 16: 1 for <= 16
// heads, more only where a small shared memory makes the tile choice fall back to 16 rows),
// 512 threads, 1 CTA per SM:
//   warps 0..7   consumers: the register-Q core (register_q_core.cuh) over a ring of kStages bf16
//                tiles, synchronised with named barriers over their own 8 warps only;
//   warps 8..15  producers: for block j of the part, resolve its 32 row addresses (kRawStages
//                blocks ahead), gather its raw FP8 rows with cp.async into a ring of kRawStages
//                raw stages (kRawStages - 1 blocks in flight while one is converted), wait for
//                tile j % kStages to be free, dequantise into it (raw_rows.cuh: exact fp32 scale
//                products, one rounding) and signal it full.
// Hand-offs per tile slot s: full(s) = bar.arrive by the 256 producer threads + bar.sync by the 256
// consumer threads; empty(s) = bar.arrive by the consumers after their P.V + bar.sync by the
// producers before they overwrite the slot (skipped for a slot's first fill). The producers drain
// the empty arrivals of the last blocks before they exit, so every barrier ends complete.
// Why (docs/kernels/portable_sparse_decode.md, "Session 14"): in kernel.cuh the same 8 warps
// gather, dequantise and multiply between CTA barriers, and 16 heads stayed at 0.54x the 64-head
// time at V3.2 b = 64; here each block's QK^T / softmax / P.V chain overlaps the gathers and
// conversions of the next blocks. A first version that loaded the FP8 bytes straight into the
// producers' registers (FlashMLA's producer) kept one block per 4-warp group in flight, ~1.8 TB/s,
// and measured 0.96x the split kernel at V3.2 b = 64 and 1.11x at V4 b = 64
// (benchmarks/results/ab-decode-warp-specialized-registers-2026-11-30/). Registers: 512 threads x
// 128 = the whole file on sm_80..sm_90, with no setmaxnreg, so one source serves every card; the
// consumers run the register-Q core at the same 128-register cap as the split kernel's 2-CTA
// launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/piece_inputs.cuh"
#include "cuda/portable/sparse_decode/piece_target.cuh"
#include "cuda/portable/sparse_decode/raw_rows.cuh"
#include "cuda/portable/sparse_decode/register_q_core.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::portable_decode {

// Roles and barrier ids. Ids 1 and 2 are the register-Q core's exchange barriers (1 + key half).
struct WarpRoles {
  static constexpr int kConsumerThreads = 256;  // the register-Q core's 8 warps
  static constexpr int kProducerThreads = 256;  // 8 warps, the thread count raw_rows.cuh sees
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kConsumerBarrier = 3;
  static constexpr int kProducerBarrier = 4;
};

// The barrier over the consumers' 8 warps (RegisterQCore's Barrier).
struct ConsumerBarrier {
  __device__ __forceinline__ static void sync() {
    ptx::named_barrier_sync(WarpRoles::kConsumerBarrier, WarpRoles::kConsumerThreads);
  }
};

template <class Shape, class Traits, int kStagesValue, int kRawStagesValue>
struct WarpSpecializedSmem {
  static constexpr int kStages = kStagesValue;        // bf16 tiles
  static constexpr int kRawStages = kRawStagesValue;  // raw stages: kRawStages - 1 gathers in flight
  static constexpr int kRawBytes = Shape::kBlockKeys * RawRow<Traits>::kPitch;
  static constexpr int kScaleRows = Traits::kScalesInRow ? 1 : Shape::kBlockKeys;
  static_assert(5 + 2 * kStages <= 16 && kRawStages >= 2, "16 named barriers per CTA");

  alignas(1024) uint8_t q[Shape::kQBytes];                 // [16, d_qk] bf16; then the exchange
  alignas(1024) uint8_t kv[kStages][Shape::kKvTileBytes];  // ring of [32, d_qk] bf16 tiles
  alignas(1024) uint8_t p[Shape::kPBytes];                 // [16, 64] bf16, swizzled
  alignas(16) uint8_t raw[kRawStages][kRawBytes];          // ring of [32, kPitch] raw token rows
  float red_max[Shape::kKeyGroups * Shape::kRows];         // [4, 16]
  float red_sum[Shape::kKeyGroups * Shape::kRows];         // [4, 16]
  uint8_t valid[kStages][Shape::kBlockKeys];               // per tile: key validity (consumers)
  // Per raw stage: the block's row addresses and slot validity, staged by producer warp 0.
  const uint8_t* row_ptr[kRawStages][Shape::kBlockKeys];
  const uint8_t* scale_ptr[kRawStages][kScaleRows];
  uint8_t raw_valid[kRawStages][Shape::kBlockKeys];

  __device__ __forceinline__ static int full_barrier(int slot) { return 5 + slot; }
  __device__ __forceinline__ static int empty_barrier(int slot) { return 5 + kStages + slot; }
};

// Two bf16 tiles and four raw stages: 180,224 B for v32_fp8, 162,816 B for v4_fp8 (sizeof), so
// sm_90 runs both and the A100 (163 KiB) v4_fp8; where it does not fit (sm_86 / sm_89's 99 KiB)
// the split kernel's 16 x 32 tile runs (kernel_tables.cpp decode_entry).
inline constexpr int kWarpSpecializedStages = 2;
inline constexpr int kWarpSpecializedRawStages = 4;

// The blocks of a part in order, main then extra list of each query, skipping queries without
// blocks: the producers' walk (the consumers walk queries, since every query is stored).
template <int kBlockKeys>
struct PartBlockCursor {
  const DecodeLaunch* launch;
  int32_t query, end_query, end_block;
  QueryLists lists;
  int block, block_end;

  __device__ __forceinline__ void begin(const DecodeLaunch& l,
                                        const planning::DecodePartSchedule& part) {
    launch = &l;
    query = part.begin_query;
    end_query = part.end_query;
    end_block = part.end_block;
    block = part.begin_block;
    block_end = 0;
    if (query <= end_query) {
      load();
      settle();
    }
  }
  __device__ __forceinline__ bool done() const { return block >= block_end; }
  __device__ __forceinline__ void advance() {
    ++block;
    settle();
  }

 private:
  __device__ __forceinline__ void load() {
    const int64_t s_q = launch->p.problem.s_q;
    lists = query_lists<kBlockKeys>(launch->p, query / s_q, query % s_q);
    block_end = query == end_query ? end_block : lists.blocks_total;
  }
  __device__ __forceinline__ void settle() {
    while (block >= block_end && query < end_query) {
      ++query;
      block = 0;
      load();
    }
  }
};

// load (addresses), producer warp 0: slot `t` of the cursor's block from its index into raw
// stage `stage`'s row addresses and validity.
template <class Shape, class Traits, class Smem>
__device__ __forceinline__ void stage_rows(const DecodeLaunch& launch,
                                           const PartBlockCursor<Shape::kBlockKeys>& cursor,
                                           int32_t index, int stage, int t, Smem& sm) {
  const detail::KvCacheParams& cache =
      cursor.block < cursor.lists.blocks_main ? launch.p.cache : launch.p.extra_cache;
  const bool valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const SlotRows rows = slot_rows<Traits>(cache, valid ? static_cast<uint32_t>(index) : 0u);
  sm.row_ptr[stage][t] = rows.data;
  if constexpr (!Traits::kScalesInRow) sm.scale_ptr[stage][t] = rows.scales;
  sm.raw_valid[stage][t] = valid ? 1 : 0;
}

// The producers (thread t of 256). Block j: staged (addresses) in iteration j - kRawStages (or
// the prologue), gathered in iteration j - kRawStages + 1, converted into tile j % kStages in
// iteration j. One producer barrier per block.
template <class Shape, class Traits, class Smem>
__device__ __forceinline__ void produce(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int t,
                                        Smem& sm) {
  constexpr int kRaw = Smem::kRawStages;
  auto producer_sync = [] {
    ptx::named_barrier_sync(WarpRoles::kProducerBarrier, WarpRoles::kProducerThreads);
  };
  auto gather = [&](int stage) {
    gather_raw_rows<Shape, Traits, Shape::kBlockKeys>(smem_u32(sm.raw[stage]), t,
                                                      sm.row_ptr[stage], sm.scale_ptr[stage],
                                                      sm.raw_valid[stage]);
  };
  PartBlockCursor<Shape::kBlockKeys> cursor;  // the next block to stage
  cursor.begin(launch, part);
  int staged = 0;
  for (; staged < kRaw && !cursor.done(); ++staged, cursor.advance()) {
    if (t < Shape::kBlockKeys) {
      stage_rows<Shape, Traits>(launch, cursor, slot_index<Shape>(cursor.lists, cursor.block, t),
                                staged, t, sm);
    }
  }
  producer_sync();
  for (int j = 0; j < kRaw - 1; ++j) {
    if (j < staged) gather(j);
    ptx::cp_async_commit();
  }
  for (int j = 0; j < staged; ++j) {
    const int stage = j % kRaw, slot = j % Smem::kStages;
    // Block j + kRaw's indices, requested now: needed only after the wait and the conversion.
    const bool stage_next = !cursor.done();
    const int32_t next_index =
        stage_next ? slot_index<Shape>(cursor.lists, cursor.block, t) : -1;
    ptx::cp_async_wait<kRaw - 2>();  // this thread's copies of block j landed
    // Every producer's copies of block j landed; block j + kRaw - 1's addresses are staged; every
    // producer is done with raw stage (j - 1) % kRaw, which block j + kRaw - 1 refills.
    producer_sync();
    if (j + kRaw - 1 < staged) gather((j + kRaw - 1) % kRaw);
    ptx::cp_async_commit();
    // Tile `slot` held block j - kStages until the consumers arrived on empty.
    if (j >= Smem::kStages) {
      ptx::named_barrier_sync(Smem::empty_barrier(slot),
                              WarpRoles::kConsumerThreads + WarpRoles::kProducerThreads);
    }
    dequantize_rows<Shape, Traits>(t, sm, stage, slot);
    if (t < Shape::kBlockKeys) sm.valid[slot][t] = sm.raw_valid[stage][t];
    ptx::named_barrier_arrive(Smem::full_barrier(slot),
                              WarpRoles::kConsumerThreads + WarpRoles::kProducerThreads);
    // Block j + kRaw into raw stage j % kRaw: its rows were read by this iteration's conversion,
    // its addresses and flags only by this warp (the flags just above) and the gather long done.
    if (stage_next) {
      if (t < Shape::kBlockKeys) stage_rows<Shape, Traits>(launch, cursor, next_index, stage, t, sm);
      ++staged;
      cursor.advance();
    }
  }
  // Drain: the consumers arrive on empty after every block; the arrivals of the last kStages
  // blocks have no later conversion to consume them.
  for (int j = staged > Smem::kStages ? staged - Smem::kStages : 0; j < staged; ++j) {
    ptx::named_barrier_sync(Smem::empty_barrier(j % Smem::kStages),
                            WarpRoles::kConsumerThreads + WarpRoles::kProducerThreads);
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
      ptx::named_barrier_sync(Smem::full_barrier(slot),
                              WarpRoles::kConsumerThreads + WarpRoles::kProducerThreads);
      Core::process_block(sm, smem_u32(sm.kv[slot]), sm.valid[slot], scale_log2, w, acc);
      ptx::named_barrier_arrive(Smem::empty_barrier(slot),
                                WarpRoles::kConsumerThreads + WarpRoles::kProducerThreads);
    }
    Core::store(sm, PieceTarget{&launch, b, s, planning::piece_partial_slot(part, query,
                                                                            launch.split_offsets),
                                head0},
                w, acc);
  }
}

template <class Shape, class Traits, int kStages, int kRawStages>
__global__ void __launch_bounds__(WarpRoles::kThreads, 1)
    warp_specialized_decode_kernel(const DecodeLaunch launch) {
  using Smem = WarpSpecializedSmem<Shape, Traits, kStages, kRawStages>;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& sm = *reinterpret_cast<Smem*>(smem_bytes);
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int thread = threadIdx.x;
  if (thread < WarpRoles::kConsumerThreads) {
    consume<Shape>(launch, part, static_cast<int>(blockIdx.y) * Shape::kRows, thread, sm);
  } else {
    produce<Shape, Traits>(launch, part, thread - WarpRoles::kConsumerThreads, sm);
  }
}

template <KvCacheFormat kFormat, int kDqk>
using WarpSpecializedKernelSmem =
    WarpSpecializedSmem<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>, kWarpSpecializedStages,
                        kWarpSpecializedRawStages>;

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_smem_bytes() {
  return static_cast<int>(sizeof(WarpSpecializedKernelSmem<kFormat, kDqk>));
}

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_ctas_per_sm() {
  auto kernel = warp_specialized_decode_kernel<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>,
                                               kWarpSpecializedStages, kWarpSpecializedRawStages>;
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
                                               kWarpSpecializedStages, kWarpSpecializedRawStages>;
  const int smem = warp_specialized_decode_smem_bytes<kFormat, kDqk>();
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  const dim3 grid(static_cast<unsigned>(launch.num_parts),
                  static_cast<unsigned>(decode_head_groups(launch.p.problem.h_q, 16)));
  kernel<<<grid, WarpRoles::kThreads, smem, stream>>>(launch);
  return check_last_launch("warp_specialized_decode_kernel");
}

}  // namespace sparse_mla::cuda::portable_decode
