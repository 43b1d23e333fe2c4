// Warp-specialised V4.1 split kernel: the 16-row x 32-key register-Q tile over a v41_fp8 main cache
// and an optional v41_fp8 / v41_fp4 extra cache (either page layout each), with the gather and
// dequantisation in producer warps. The protocol, roles, barriers, shared-memory plan and the
// consumers are warp_specialized_kernel.cuh's (consume(), PartBlockCursor, WarpRoles,
// WarpSpecializedSmem over the V4.1 raw row of 528 bytes); the producers stage, gather and
// dequantise each block with its own cache's traits (v41_rows.cuh), as the V4.1 split kernel does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/device/ptx/barrier.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/v41_rows.cuh"
#include "cuda/portable/sparse_decode/warp_specialized_kernel.cuh"

namespace sparse_mla::cuda::portable_decode {

using V41WarpSpecializedSmem =
    WarpSpecializedSmem<RegisterQShape<512>, V41RawRecord, kWarpSpecializedRawStages>;

// The kernel's shared memory: the warp-specialised plan, and per raw stage whether its block holds
// v41_fp4 records (staged with the addresses by the group's first warp; every thread of the group
// reads it into a register before the group barrier after which thread 0 may restage it).
struct V41StageKinds {
  uint8_t fp4[2 * kWarpSpecializedRawStages];
};
struct V41WarpSpecializedKernelSmem {
  V41WarpSpecializedSmem ws;
  V41StageKinds kinds;
};

// load (addresses), a group's first warp: slot `t` of the cursor's block into raw stage `stage`.
template <int kBlockKeys>
__device__ __forceinline__ void stage_v41_ws_rows(const DecodeLaunch& launch,
                                                  const PartBlockCursor<kBlockKeys>& cursor,
                                                  int32_t index, int stage, int t,
                                                  V41WarpSpecializedSmem& sm,
                                                  V41StageKinds& kinds) {
  const bool is_main = cursor.block < cursor.lists.blocks_main;
  const V41SlotRows r = v41_rows_of(is_main ? launch.p.cache : launch.p.extra_cache, index);
  sm.row_ptr[stage][t] = r.rows.data;
  sm.scale_ptr[stage][t] = r.rows.scales;
  sm.raw_valid[stage][t] = r.valid ? 1 : 0;
  if (t == 0) kinds.fp4[stage] = block_is_fp4(launch.p, cursor.lists, cursor.block) ? 1 : 0;
}

// Producer group `group` (thread t of 128): produce() of warp_specialized_kernel.cuh with the V4.1
// stage, gather and dequantisation.
__device__ __forceinline__ void produce_v41(const DecodeLaunch& launch,
                                            const planning::DecodePartSchedule& part, int group,
                                            int t, V41WarpSpecializedSmem& sm,
                                            V41StageKinds& kinds) {
  using Shape = RegisterQShape<512>;
  using Producer = ProducerShape<512>;
  constexpr int kRaw = V41WarpSpecializedSmem::kRawStages;
  const int first_stage = group * kRaw;
  auto group_sync = [&] {
    ptx::named_barrier_sync(WarpRoles::group_barrier(group), WarpRoles::kGroupThreads);
  };
  auto gather = [&](int stage) {
    const uint32_t raw = smem_u32(sm.raw[stage]);
    if (kinds.fp4[stage] != 0) {
      gather_v41_rows<Producer::kThreads, Shape::kBlockKeys, true>(
          raw, t, sm.row_ptr[stage], sm.scale_ptr[stage], sm.raw_valid[stage]);
    } else {
      gather_v41_rows<Producer::kThreads, Shape::kBlockKeys, false>(
          raw, t, sm.row_ptr[stage], sm.scale_ptr[stage], sm.raw_valid[stage]);
    }
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
      stage_v41_ws_rows(launch, cursor, slot_index<Shape>(cursor.lists, cursor.block, t),
                        first_stage + staged, t, sm, kinds);
    }
  }
  group_sync();
  for (int i = 0; i < kRaw - 1; ++i) {
    if (i < staged) gather(first_stage + i);
    ptx::cp_async_commit();
  }
  for (int i = 0; i < staged; ++i) {
    const int stage = first_stage + i % kRaw;
    // Block i's kind, staged two group barriers ago (or before the first), restaged after the next.
    const bool fp4 = kinds.fp4[stage] != 0;
    const bool stage_next = !cursor.done();
    const int32_t next_index = stage_next ? slot_index<Shape>(cursor.lists, cursor.block, t) : -1;
    ptx::cp_async_wait<kRaw - 2>();  // this thread's copies of block i landed
    // Every copy of block i landed; block i + kRaw - 1's addresses (and kind) are staged; the group
    // is done with raw stage (i - 1) % kRaw, which block i + kRaw - 1 refills.
    group_sync();
    if (i + kRaw - 1 < staged) gather(first_stage + (i + kRaw - 1) % kRaw);
    ptx::cp_async_commit();
    if (i > 0) {
      ptx::named_barrier_sync(WarpRoles::empty_barrier(group), WarpRoles::kHandOffThreads);
    }
    if (fp4) {
      dequantize_v41_rows<Producer, true>(t, sm, stage, group);
    } else {
      dequantize_v41_rows<Producer, false>(t, sm, stage, group);
    }
    if (t < Shape::kBlockKeys) sm.valid[group][t] = sm.raw_valid[stage][t];
    ptx::named_barrier_arrive(WarpRoles::full_barrier(group), WarpRoles::kHandOffThreads);
    if (stage_next) {
      if (t < Shape::kBlockKeys) stage_v41_ws_rows(launch, cursor, next_index, stage, t, sm, kinds);
      ++staged;
      next_block();
    }
  }
  if (staged > 0) {
    ptx::named_barrier_sync(WarpRoles::empty_barrier(group), WarpRoles::kHandOffThreads);
  }
}

template <class Shape>
__global__ void __launch_bounds__(WarpRoles::kThreads, 1)
    v41_warp_specialized_decode_kernel(const DecodeLaunch launch) {
  static_assert(std::is_same_v<Shape, RegisterQShape<512>>, "the register-Q tile only");
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& all = *reinterpret_cast<V41WarpSpecializedKernelSmem*>(smem_bytes);
  V41WarpSpecializedSmem& sm = all.ws;
  V41StageKinds& kinds = all.kinds;
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const int thread = threadIdx.x;
  if (thread < WarpRoles::kConsumerThreads) {
    consume<Shape>(launch, part, static_cast<int>(blockIdx.y) * Shape::kRows, thread, sm);
  } else {
    const int t = thread - WarpRoles::kConsumerThreads;
    produce_v41(launch, part, t / WarpRoles::kGroupThreads, t % WarpRoles::kGroupThreads, sm,
                kinds);
  }
}

template <int kRows, int kBlockKeys>
int v41_warp_specialized_decode_smem_bytes() {
  static_assert(kRows == 16 && kBlockKeys == 32, "the register-Q tile only");
  return static_cast<int>(sizeof(V41WarpSpecializedKernelSmem));
}

template <int kRows, int kBlockKeys>
int v41_warp_specialized_decode_ctas_per_sm() {
  return resident_ctas_per_sm(v41_warp_specialized_decode_kernel<RegisterQShape<512>>,
                              WarpRoles::kThreads,
                              v41_warp_specialized_decode_smem_bytes<kRows, kBlockKeys>());
}

template <int kRows, int kBlockKeys>
Status launch_v41_warp_specialized_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  const int smem = v41_warp_specialized_decode_smem_bytes<kRows, kBlockKeys>();
  auto kernel = v41_warp_specialized_decode_kernel<RegisterQShape<512>>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  const dim3 grid(static_cast<unsigned>(launch.num_parts),
                  static_cast<unsigned>(decode_head_groups(launch.p.problem.h_q, 16)));
  kernel<<<grid, WarpRoles::kThreads, smem, stream>>>(launch);
  return check_last_launch("v41_warp_specialized_decode_kernel");
}

}  // namespace sparse_mla::cuda::portable_decode
