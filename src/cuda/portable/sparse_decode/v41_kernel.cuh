// Portable (sm_80+) sparse decode split kernel over DeepSeek V4.1 caches (SPEC §3, §4): a v41_fp8
// main cache and an optional v41_fp8 or v41_fp4 extra cache, each in page_split or
// token_interleaved layout and with its own page size. Same grid, schedule, MMA cores and piece
// store as the split kernel of the other formats (kernel.cuh); what differs is the block's rows:
//   stage       the slot's data row and scale row, addressed with the V41Traits of its cache's
//               format and layout (a CTA-uniform branch per block: main blocks read the main
//               cache's traits, extra blocks the extra cache's);
//   gather      the record's value bytes (512 / 256) and scale bytes (16 / 32) with cp.async into
//               one raw row [values | scales] of 528 bytes (the larger record);
//   dequantise  v41_fp8: 8 e4m3 x their ue8m0 scale per 16-B chunk (as v4_fp8); v41_fp4: 8 e2m1
//               codes (4 bytes) x their e4m3 scale as an exact bf16x2 product (fp4_dequant.cuh).
// Invalid slots point at slot 0 of their cache and are zero-filled (value and scale bytes 0, so
// they dequantise to 0), never read. The three roles are v41_rows.cuh's, which the
// warp-specialised 16 x 32 tile (v41_warp_specialized_kernel.cuh) runs in producer warps. No
// paired head groups.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/decode/piece_inputs.cuh"
#include "cuda/device/fp4_dequant.cuh"
#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/gather.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/mma_core.cuh"
#include "cuda/portable/sparse_decode/v41_rows.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::portable_decode {

template <class Shape>
using V41Smem = DecodeSmem<Shape, V41RawRecord>;

// load (addresses): threads 0..kBlockKeys-1 resolve slot `thread` of block `block`.
template <class Shape>
__device__ __forceinline__ void stage_v41_rows(const detail::DecodeParams& p,
                                               const QueryLists& lists, int block, int step,
                                               int thread, int32_t index, V41Smem<Shape>& sm) {
  if (thread >= Shape::kBlockKeys) return;
  const V41SlotRows r = v41_rows_of(block < lists.blocks_main ? p.cache : p.extra_cache, index);
  sm.row_ptr[thread] = r.rows.data;
  sm.scale_ptr[thread] = r.rows.scales;
  sm.valid[step & 1][thread] = r.valid ? 1 : 0;
}

template <class Shape>
__device__ __forceinline__ void gather_v41_block(const detail::DecodeParams& p,
                                                 const QueryLists& lists, int block, int step,
                                                 int thread, V41Smem<Shape>& sm) {
  const uint32_t raw = smem_u32(sm.raw[0]);
  const uint8_t* valid = sm.valid[step & 1];
  if (block_is_fp4(p, lists, block)) {
    gather_v41_rows<Shape::kThreads, Shape::kBlockKeys, true>(raw, thread, sm.row_ptr, sm.scale_ptr,
                                                              valid);
  } else {
    gather_v41_rows<Shape::kThreads, Shape::kBlockKeys, false>(raw, thread, sm.row_ptr,
                                                               sm.scale_ptr, valid);
  }
}

template <class Shape>
__global__ void __launch_bounds__(Shape::kThreads, kDecodeMinCtas<Shape>)
    v41_sparse_decode_kernel(const DecodeLaunch launch) {
  using Smem = V41Smem<Shape>;
  using Core = DecodeCore<Shape>;
  extern __shared__ __align__(1024) uint8_t smem_bytes[];
  auto& sm = *reinterpret_cast<Smem*>(smem_bytes);
  const detail::DecodeParams& p = launch.p;
  const int thread = threadIdx.x;
  const int head0 = static_cast<int>(blockIdx.y) * Shape::kRows;
  const planning::DecodePartSchedule part = launch.parts[blockIdx.x];
  const typename Core::Place w = Core::place(thread);
  const float scale_log2 = p.softmax_scale * kLog2e;
  const int64_t s_q = p.problem.s_q;

  for (int32_t query = part.begin_query; query <= part.end_query; ++query) {
    const int64_t b = query / s_q, s = query % s_q;
    const QueryLists lists = query_lists<Shape::kBlockKeys>(p, b, s);
    const int block_begin = query == part.begin_query ? part.begin_block : 0;
    const int block_end = query == part.end_query ? part.end_block : lists.blocks_total;
    const int32_t slot = planning::piece_partial_slot(part, query, launch.split_offsets);

    __syncthreads();  // the previous piece is done with Q, the tile and the scratch arrays
    typename Core::Accum acc;
    acc.reset();
    load_q<Shape>(p, b, s, head0, thread, sm);
    if (block_begin < block_end) {
      stage_v41_rows<Shape>(p, lists, block_begin, 0, thread,
                            slot_index<Shape>(lists, block_begin, thread), sm);
    }
    __syncthreads();
    if (block_begin < block_end) gather_v41_block<Shape>(p, lists, block_begin, 0, thread, sm);
    ptx::cp_async_commit();

    for (int block = block_begin; block < block_end; ++block) {
      const int step = block - block_begin;
      const bool has_next = block + 1 < block_end;
      const int32_t next_index = has_next ? slot_index<Shape>(lists, block + 1, thread) : -1;
      ptx::cp_async_wait<0>();
      // This block's bytes landed and every warp is done with the tile; the barrier also
      // publishes the cp.async bytes to the threads that dequantise them.
      __syncthreads();
      if (block_is_fp4(p, lists, block)) {
        dequantize_v41_rows<Shape, true>(thread, sm, 0, 0);
      } else {
        dequantize_v41_rows<Shape, false>(thread, sm, 0, 0);
      }
      if (has_next) stage_v41_rows<Shape>(p, lists, block + 1, step + 1, thread, next_index, sm);
      __syncthreads();  // the bf16 tile is complete, the raw stage free
      if (has_next) {
        gather_v41_block<Shape>(p, lists, block + 1, step + 1, thread, sm);
        ptx::cp_async_commit();
      }
      if (step == 0) Core::begin_piece(sm, w, acc);  // Q landed with the first block's rows
      Core::process_block(sm, smem_u32(sm.kv[0]), sm.valid[step & 1], scale_log2, w, acc);
    }
    ptx::cp_async_wait<0>();
    Core::store(sm, PieceTarget{&launch, b, s, slot, head0}, w, acc);
  }
}

template <int kRows, int kBlockKeys>
int v41_decode_smem_bytes() {
  return static_cast<int>(sizeof(V41Smem<DecodeShape<512, kRows, kBlockKeys>>));
}

template <int kRows, int kBlockKeys>
int v41_decode_ctas_per_sm() {
  using Shape = DecodeShape<512, kRows, kBlockKeys>;
  return resident_ctas_per_sm(v41_sparse_decode_kernel<Shape>, Shape::kThreads,
                              v41_decode_smem_bytes<kRows, kBlockKeys>());
}

template <int kRows, int kBlockKeys>
Status launch_v41_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  using Shape = DecodeShape<512, kRows, kBlockKeys>;
  const int smem = v41_decode_smem_bytes<kRows, kBlockKeys>();
  auto kernel = v41_sparse_decode_kernel<Shape>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  const int head_groups = decode_head_groups(launch.p.problem.h_q, kRows);
  const dim3 grid(static_cast<unsigned>(launch.num_parts), static_cast<unsigned>(head_groups));
  kernel<<<grid, Shape::kThreads, smem, stream>>>(launch);
  return check_last_launch("v41_sparse_decode_kernel");
}

}  // namespace sparse_mla::cuda::portable_decode
