// Warp-specialised split kernel of the portable (sm_80+) sparse decode for <= 16 heads and the
// FP8 caches (SPEC §3): the 16-row x 32-key register-Q tile of kernel.cuh, with its gather and
// dequantisation moved out of the MMA warps. Grid (num_parts, head groups of 16: 1 for <= 16
// heads, more only where a small shared memory makes the tile choice fall back to 16 rows),
// 512 threads, 1 CTA per SM:
//   warps 0..7   consumers: the register-Q core (register_q_core.cuh) over two bf16 tiles,
//                synchronised with named barriers over their own 8 warps only;
//   warps 8..15  producers, two groups of 4 warps: group g takes the part's blocks j = g, g + 2,
//                ... into tile g. Per block it resolves the 32 row addresses (kRawStages blocks
//                ahead), gathers the raw FP8 rows with cp.async into its ring of kRawStages raw
//                stages, waits for tile g to be free, dequantises into it (raw_rows.cuh: exact
//                fp32 scale products, one rounding) and signals it full. The two groups convert
//                two blocks at once.
// Hand-offs per tile g: full(g) = bar.arrive by group g's 128 threads + bar.sync by the 256
// consumer threads; empty(g) = bar.arrive by the consumers after their P.V + bar.sync by group g
// before it overwrites the tile (skipped for its first block). Each group drains the consumers'
// last empty arrival before it exits, so every barrier ends complete. compute-sanitizer racecheck
// (CUDA 13.0) does not model arrive / sync hand-offs (the probe racecheck_arrive_probe.cu of
// commit bd7b7ca) and reports hazards on this protocol; gpu_check.sh runs its racecheck on the
// split kernel.
// Why and measured (H200, docs/kernels/portable_sparse_decode.md "Versions tried"): in kernel.cuh
// the same 8 warps gather, dequantise and multiply between CTA barriers, and 16 heads stayed at
// 0.54x the 64-head time at V3.2 b = 64 (99.4 us). This kernel: 89.8 us (0.49x). Versions measured:
// FP8 bytes loaded straight into two groups' registers (FlashMLA's producer; one block per group
// in flight) 95.4 us; one 8-warp producer over a 4-stage cp.async ring 102 us (its producers
// alone took 85 us: one conversion at a time, a serial chain per block); two groups with 3 raw
// stages each 92.8 us. Registers: 512 threads x 128 = the whole file on sm_80..sm_90, with no
// setmaxnreg, so one source serves every card; the consumers run the register-Q core at the same
// 128-register cap as the split kernel's 2-CTA launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode/piece_inputs.cuh"
#include "cuda/decode/piece_target.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/device/smem_tile.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/raw_rows.cuh"
#include "cuda/portable/sparse_decode/register_q_core.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::portable_decode {

// Roles and barrier ids. Ids 1 and 2 are the register-Q core's exchange barriers (1 + key half).
struct WarpRoles {
  static constexpr int kConsumerThreads = 256;  // the register-Q core's 8 warps
  static constexpr int kGroupThreads = 128;     // a producer group: 4 warps
  static constexpr int kThreads = kConsumerThreads + 2 * kGroupThreads;
  static constexpr int kHandOffThreads = kConsumerThreads + kGroupThreads;  // full / empty
  static constexpr int kConsumerBarrier = 3;
  __device__ __forceinline__ static int group_barrier(int group) { return 4 + group; }
  // Tile g is filled by group g: full(g) and empty(g).
  __device__ __forceinline__ static int full_barrier(int group) { return 6 + group; }
  __device__ __forceinline__ static int empty_barrier(int group) { return 8 + group; }
};

// The barrier over the consumers' 8 warps (RegisterQCore's Barrier).
struct ConsumerBarrier {
  __device__ __forceinline__ static void sync() {
    ptx::named_barrier_sync(WarpRoles::kConsumerBarrier, WarpRoles::kConsumerThreads);
  }
};

// The shape a producer group's 128 threads see in raw_rows.cuh (gather and dequantisation: the
// thread count and the block's keys and dims).
template <int kDqk>
using ProducerShape = TileDims<kDqk, 16, 4, 32>;

template <class Shape, class Traits, int kRawStagesValue>
struct WarpSpecializedSmem {
  static constexpr int kRawStages = kRawStagesValue;  // per group: kRawStages - 1 gathers in flight
  static constexpr int kRawBytes = Shape::kBlockKeys * RawRow<Traits>::kPitch;
  static constexpr int kScaleRows = Traits::kScalesInRow ? 1 : Shape::kBlockKeys;
  static_assert(kRawStages >= 2);

  alignas(1024) uint8_t q[Shape::kQBytes];             // [16, d_qk] bf16; then the exchange
  alignas(1024) uint8_t kv[2][Shape::kKvTileBytes];    // tile g: [32, d_qk] bf16 of group g
  alignas(1024) uint8_t p[Shape::kPBytes];             // [16, 64] bf16, swizzled
  alignas(16) uint8_t raw[2 * kRawStages][kRawBytes];  // group g: stages g * kRawStages + s
  float red_max[Shape::kKeyGroups * Shape::kRows];     // [4, 16]
  float red_sum[Shape::kKeyGroups * Shape::kRows];     // [4, 16]
  uint8_t valid[2][Shape::kBlockKeys];                 // per tile: key validity (consumers)
  // Per raw stage: the block's row addresses and slot validity, staged by the group's first warp.
  const uint8_t* row_ptr[2 * kRawStages][Shape::kBlockKeys];
  const uint8_t* scale_ptr[2 * kRawStages][kScaleRows];
  uint8_t raw_valid[2 * kRawStages][Shape::kBlockKeys];
};

// Two raw stages per group (one gather in flight while the other stage converts): 180,224 B for
// v32_fp8, 162,816 B for v4_fp8 (sizeof), so sm_90 runs both and the A100 (163 KiB) v4_fp8; where
// it does not fit (sm_86 / sm_89's 99 KiB) the split kernel's 16 x 32 tile runs
// (decode_launch_policy.cpp choose_decode_tile).
// 3 per group (222 KB for v32_fp8) measured slower: 92.8 against 89.8 µs at V3.2 b = 64.
inline constexpr int kWarpSpecializedRawStages = 2;

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

// load (addresses), a group's first warp: slot `t` of the cursor's block from its index into raw
// stage `stage`'s row addresses and validity.
template <class Traits, int kBlockKeys, class Smem>
__device__ __forceinline__ void stage_rows(const DecodeLaunch& launch,
                                           const PartBlockCursor<kBlockKeys>& cursor, int32_t index,
                                           int stage, int t, Smem& sm) {
  const detail::KvCacheParams& cache =
      cursor.block < cursor.lists.blocks_main ? launch.p.cache : launch.p.extra_cache;
  const bool valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const SlotRows rows = slot_rows<Traits>(cache, valid ? static_cast<uint32_t>(index) : 0u);
  sm.row_ptr[stage][t] = rows.data;
  if constexpr (!Traits::kScalesInRow) sm.scale_ptr[stage][t] = rows.scales;
  sm.raw_valid[stage][t] = valid ? 1 : 0;
}

// Producer group `group` (thread t of 128): the part's blocks j = 2 i + group, i = 0, 1, ...,
// into tile `group`. Its i-th block: addresses staged in iteration i - kRaw (or the prologue),
// gathered in iteration i - kRaw + 1 into raw stage i % kRaw, converted in iteration i. One group
// barrier per block; the two groups convert two blocks at once.
template <class Shape, class Traits, class Smem>
__device__ __forceinline__ void produce(const DecodeLaunch& launch,
                                        const planning::DecodePartSchedule& part, int group, int t,
                                        Smem& sm) {
  using Producer = ProducerShape<Shape::kDqk>;
  constexpr int kRaw = Smem::kRawStages;
  const int first_stage = group * kRaw;
  auto group_sync = [&] {
    ptx::named_barrier_sync(WarpRoles::group_barrier(group), WarpRoles::kGroupThreads);
  };
  auto gather = [&](int stage) {
    gather_raw_rows<Producer, Traits, Shape::kBlockKeys>(
        smem_u32(sm.raw[stage]), t, sm.row_ptr[stage], sm.scale_ptr[stage], sm.raw_valid[stage]);
  };
  PartBlockCursor<Shape::kBlockKeys> cursor;  // the group's next block to stage
  cursor.begin(launch, part);
  if (group == 1 && !cursor.done()) cursor.advance();
  auto next_block = [&] {  // this group's blocks are every other block of the part
    cursor.advance();
    if (!cursor.done()) cursor.advance();
  };
  int staged = 0;
  for (; staged < kRaw && !cursor.done(); ++staged, next_block()) {
    if (t < Shape::kBlockKeys) {
      stage_rows<Traits>(launch, cursor, slot_index<Shape>(cursor.lists, cursor.block, t),
                         first_stage + staged, t, sm);
    }
  }
  group_sync();
  for (int i = 0; i < kRaw - 1; ++i) {
    if (i < staged) gather(first_stage + i);
    ptx::cp_async_commit();
  }
  for (int i = 0; i < staged; ++i) {
    const int stage = first_stage + i % kRaw;
    // The indices of the block staged at the end of this iteration, requested now.
    const bool stage_next = !cursor.done();
    const int32_t next_index = stage_next ? slot_index<Shape>(cursor.lists, cursor.block, t) : -1;
    ptx::cp_async_wait<kRaw - 2>();  // this thread's copies of block i landed
    // Every copy of block i landed; block i + kRaw - 1's addresses are staged; the group is done
    // with raw stage (i - 1) % kRaw, which block i + kRaw - 1 refills.
    group_sync();
    if (i + kRaw - 1 < staged) gather(first_stage + (i + kRaw - 1) % kRaw);
    ptx::cp_async_commit();
    // Tile `group` held the group's previous block until the consumers arrived on empty.
    if (i > 0) {
      ptx::named_barrier_sync(WarpRoles::empty_barrier(group), WarpRoles::kHandOffThreads);
    }
    dequantize_rows<Producer, Traits>(t, sm, stage, group);
    if (t < Shape::kBlockKeys) sm.valid[group][t] = sm.raw_valid[stage][t];
    ptx::named_barrier_arrive(WarpRoles::full_barrier(group), WarpRoles::kHandOffThreads);
    // Block i + kRaw into raw stage i % kRaw: its rows were read by this iteration's conversion,
    // its addresses and flags only by this warp (the flags just above) and the gather long done.
    if (stage_next) {
      if (t < Shape::kBlockKeys) stage_rows<Traits>(launch, cursor, next_index, stage, t, sm);
      ++staged;
      next_block();
    }
  }
  // Drain: the consumers arrive on empty after each of this group's blocks; the last arrival has
  // no later conversion to consume it.
  if (staged > 0) {
    ptx::named_barrier_sync(WarpRoles::empty_barrier(group), WarpRoles::kHandOffThreads);
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
      const int group = j & 1;  // the producer group, and its tile
      ptx::named_barrier_sync(WarpRoles::full_barrier(group), WarpRoles::kHandOffThreads);
      Core::process_block(sm, smem_u32(sm.kv[group]), sm.valid[group], scale_log2, w, acc);
      ptx::named_barrier_arrive(WarpRoles::empty_barrier(group), WarpRoles::kHandOffThreads);
    }
    Core::store(sm,
                PieceTarget{&launch, b, s,
                            planning::piece_partial_slot(part, query, launch.split_offsets), head0},
                w, acc);
  }
}

template <class Shape, class Traits, int kRawStages>
__global__ void __launch_bounds__(WarpRoles::kThreads, 1)
    warp_specialized_decode_kernel(const DecodeLaunch launch) {
  using Smem = WarpSpecializedSmem<Shape, Traits, kRawStages>;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& sm = *reinterpret_cast<Smem*>(smem_bytes);
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int thread = threadIdx.x;
  if (thread < WarpRoles::kConsumerThreads) {
    consume<Shape>(launch, part, static_cast<int>(blockIdx.y) * Shape::kRows, thread, sm);
  } else {
    const int t = thread - WarpRoles::kConsumerThreads;
    produce<Shape, Traits>(launch, part, t / WarpRoles::kGroupThreads, t % WarpRoles::kGroupThreads,
                           sm);
  }
}

template <KvCacheFormat kFormat, int kDqk>
using WarpSpecializedKernelSmem =
    WarpSpecializedSmem<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>, kWarpSpecializedRawStages>;

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_smem_bytes() {
  return static_cast<int>(sizeof(WarpSpecializedKernelSmem<kFormat, kDqk>));
}

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_ctas_per_sm() {
  auto kernel = warp_specialized_decode_kernel<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>,
                                               kWarpSpecializedRawStages>;
  return resident_ctas_per_sm(kernel, WarpRoles::kThreads,
                              warp_specialized_decode_smem_bytes<kFormat, kDqk>());
}

template <KvCacheFormat kFormat, int kDqk>
Status launch_warp_specialized_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  auto kernel = warp_specialized_decode_kernel<RegisterQShape<kDqk>, KvTraits<kFormat, kDqk>,
                                               kWarpSpecializedRawStages>;
  const int smem = warp_specialized_decode_smem_bytes<kFormat, kDqk>();
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  const dim3 grid(static_cast<unsigned>(launch.num_parts),
                  static_cast<unsigned>(decode_head_groups(launch.p.problem.h_q, 16)));
  kernel<<<grid, WarpRoles::kThreads, smem, stream>>>(launch);
  return check_last_launch("warp_specialized_decode_kernel");
}

}  // namespace sparse_mla::cuda::portable_decode
