// Portable (sm_80+) sparse decode split kernel (SPEC §3): grid (num_parts, head_groups); CTA
// (part, group) processes the query pieces its DecodePartSchedule names. Per piece (one query,
// a range of its kBlockKeys-slot blocks over the main list then the extra list, one softmax):
//   load       stage the next block's clamped row addresses, cp.async raw token bytes (FP8) or
//              bf16 rows; invalid slots are zero-filled and never read;
//   dequantise raw e4m3 x fp32 scale -> bf16 tile (exact scale, kv_cache_traits.cuh offsets);
//   score/softmax/accumulate  the MMA core (mma_core.cuh: the 64-row x 64-key tile runs the wide
//              tiling of the 64-row prefill, the 16 x 32 tile the register-Q core
//              (register_q_core.cuh), every other tile the core shared with the 16/32-row prefill);
//   store      unsplit query: bf16 out (sink applied) + natural-log lse; split piece:
//              normalised fp32 partial_out + log2 partial_lse for the combine kernel.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/params.h"
#include "cuda/decode/piece_inputs.cuh"
#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/gather.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/cluster.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/mma_core.cuh"
#include "cuda/portable/sparse_decode/raw_rows.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::portable_decode {

// load (addresses): threads 0..kBlockKeys-1 resolve slot `thread` of block `block` from its
// `index` (slot_index) into the row addresses and validity flags of the next block.
template <class Shape, class Traits>
__device__ __forceinline__ void stage_block_rows(const detail::DecodeParams& p,
                                                 const QueryLists& lists, int block, int step,
                                                 int thread, int32_t index,
                                                 DecodeSmem<Shape, Traits>& sm) {
  if (thread >= Shape::kBlockKeys) return;
  const detail::KvCacheParams& cache = block < lists.blocks_main ? p.cache : p.extra_cache;
  const bool valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const SlotRows rows = slot_rows<Traits>(cache, valid ? static_cast<uint32_t>(index) : 0u);
  sm.row_ptr[thread] = rows.data;
  if constexpr (!Traits::kScalesInRow) sm.scale_ptr[thread] = rows.scales;
  sm.valid[step & 1][thread] = valid ? 1 : 0;
}

// load (rows): raw token bytes (quantized formats) or bf16 rows into tile `step & 1`. Paired head
// groups (quantized formats, see the kernel): this CTA gathers only its half of the block's rows,
// [row_base, row_base + kBlockKeys / 2), which it dequantises for both CTAs.
template <class Shape, class Traits, bool kPaired = false>
__device__ __forceinline__ void load_block_rows(int step, int thread, DecodeSmem<Shape, Traits>& sm,
                                                int row_base = 0) {
  using Smem = DecodeSmem<Shape, Traits>;
  const uint8_t* valid = sm.valid[step & 1];
  if constexpr (Smem::kQuantized) {
    gather_raw_rows<Shape, Traits, kPaired ? Shape::kBlockKeys / 2 : Shape::kBlockKeys>(
        smem_u32(sm.raw[0]), thread, sm.row_ptr, sm.scale_ptr, valid, row_base);
  } else {
    static_assert(!kPaired, "bf16 rows go straight into each CTA's own tile");
    gather_rows_swizzled<Shape::kBlockKeys, Shape::kChunksPerRow, Shape::kThreads>(
        smem_u32(sm.kv[step & 1]), thread, [&](int row) {
          return RowSource{sm.row_ptr[row], valid[row] != 0};
        });
  }
}

template <class Shape, class Traits>
__global__ void __launch_bounds__(Shape::kThreads, kDecodeMinCtas<Shape>)
    portable_sparse_decode_kernel(const DecodeLaunch launch) {
  using Smem = DecodeSmem<Shape, Traits>;
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

  // Paired head groups (sm_90, quantized formats, 2 head groups; launch.pair_head_groups): the
  // two CTAs of a cluster hold the two 64-head halves of the same query and walk the same blocks.
  // Each gathers and dequantises half of every block's rows and writes the bf16 chunks into both
  // tiles (FlashMLA's "crossover"), so the pair gathers and converts each row once instead of
  // twice. Per block: a relaxed cluster barrier ("both CTAs have finished reading their tiles";
  // no fence), then each CTA stores its half locally and into the peer with st.async, which
  // counts the bytes on the peer's mbarrier `peer_half_landed`; a CTA barrier publishes the local
  // half and the mbarrier wait the peer's. (A fenced cluster barrier in that place compiled to
  // MEMBAR.ALL.GPU + ERRBAR + CCTL.IVALL and held ~11 % of the stall samples.)
  // The register-Q tile compiles the paired path out (config.cuh kCanPairHeadGroups).
  constexpr bool kCanPair = kCanPairHeadGroups<Shape, Traits>;
  constexpr uint32_t kHalfTileBytes =
      static_cast<uint32_t>(Shape::kBlockKeys / 2 * Shape::kChunksPerRow * 16);
  const bool paired = kCanPair && launch.pair_head_groups;
  const uint32_t rank = paired ? ptx::cluster_ctarank() : 0u;
  const int row_base = static_cast<int>(rank) * (Shape::kBlockKeys / 2);
  const uint32_t peer_tile = paired ? ptx::map_shared_to_rank(smem_u32(sm.kv[0]), rank ^ 1u) : 0u;
  const uint32_t landed = smem_u32(&sm.peer_half_landed);
  const uint32_t peer_landed = paired ? ptx::map_shared_to_rank(landed, rank ^ 1u) : 0u;
  uint32_t landed_parity = 0;  // parity of the next phase of peer_half_landed (one per block)
  if (paired) {
    if (thread == 0) ptx::mbarrier_init_for_cluster(landed, 1);
    ptx::cluster_sync();  // both barriers initialised before any st.async names them
  }
  auto load_rows = [&](int step) {
    if constexpr (kCanPair) {
      if (paired) {
        load_block_rows<Shape, Traits, true>(step, thread, sm, row_base);
        return;
      }
    }
    load_block_rows<Shape, Traits>(step, thread, sm);
  };

  for (int32_t query = part.begin_query; query <= part.end_query; ++query) {
    const int64_t b = query / s_q, s = query % s_q;
    const QueryLists lists = query_lists<Shape::kBlockKeys>(p, b, s);
    const int block_begin = query == part.begin_query ? part.begin_block : 0;
    const int block_end = query == part.end_query ? part.end_block : lists.blocks_total;
    const int32_t slot = planning::piece_partial_slot(part, query, launch.split_offsets);

    __syncthreads();  // the previous piece is done with Q, the tiles and the scratch arrays
    typename Core::Accum acc;
    acc.reset();
    load_q<Shape>(p, b, s, head0, thread, sm);
    if (block_begin < block_end) {
      stage_block_rows<Shape, Traits>(p, lists, block_begin, 0, thread,
                                      slot_index<Shape>(lists, block_begin, thread), sm);
    }
    __syncthreads();
    if (block_begin < block_end) load_rows(0);
    ptx::cp_async_commit();

    for (int block = block_begin; block < block_end; ++block) {
      const int step = block - block_begin;
      const bool has_next = block + 1 < block_end;
      // The next block's indices are requested now; they are needed only after the wait, the
      // barrier and the dequantisation below.
      const int32_t next_index = has_next ? slot_index<Shape>(lists, block + 1, thread) : -1;
      ptx::cp_async_wait<0>();
      // This block's bytes landed; every warp (of both CTAs, when paired) is done with the tiles.
      // The CTA barrier also publishes the cp.async bytes to the threads that dequantise them
      // (other threads than those that gathered them); the relaxed cluster barrier orders no
      // memory, it only says that the peer has consumed every value it read from its tile.
      __syncthreads();
      if (paired) ptx::cluster_sync_relaxed();
      if constexpr (kCanPair) {
        if (paired) {
          if (thread == 0) ptx::mbarrier_arrive_expect_tx(landed, kHalfTileBytes);
          dequantize_rows<Shape, Traits, true>(thread, sm, 0, 0, row_base, peer_tile, peer_landed);
        } else {
          dequantize_rows<Shape, Traits>(thread, sm, 0, 0);
        }
      } else if constexpr (Smem::kQuantized) {
        dequantize_rows<Shape, Traits>(thread, sm, 0, 0);
      }
      if (has_next) {
        stage_block_rows<Shape, Traits>(p, lists, block + 1, step + 1, thread, next_index, sm);
      }
      __syncthreads();  // the bf16 tile is complete (this CTA's half, when paired)
      if (paired) {
        ptx::mbarrier_wait_parity(landed, landed_parity);  // ... and the peer's half
        landed_parity ^= 1u;
      }
      if (has_next) {
        load_rows(step + 1);
        ptx::cp_async_commit();
      }
      if (step == 0) Core::begin_piece(sm, w, acc);  // Q landed with the first block's rows
      const uint32_t tile = smem_u32(sm.kv[Smem::kQuantized ? 0 : (step & 1)]);
      Core::process_block(sm, tile, sm.valid[step & 1], scale_log2, w, acc);
    }
    ptx::cp_async_wait<0>();
    Core::store(sm, PieceTarget{&launch, b, s, slot, head0}, w, acc);
  }
  // No CTA of a pair leaves while its own st.async into the peer may be in flight or the peer may
  // still write into it (the documented exit rule for distributed shared memory).
  if (paired) ptx::cluster_sync();
}

template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
int decode_smem_bytes() {
  return static_cast<int>(
      sizeof(DecodeSmem<DecodeShape<kDqk, kRows, kBlockKeys>, KvTraits<kFormat, kDqk>>));
}

template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
int decode_ctas_per_sm() {
  using Shape = DecodeShape<kDqk, kRows, kBlockKeys>;
  return resident_ctas_per_sm(portable_sparse_decode_kernel<Shape, KvTraits<kFormat, kDqk>>,
                              Shape::kThreads,
                              decode_smem_bytes<kFormat, kDqk, kRows, kBlockKeys>());
}

// The launch configuration of a paired launch: grid (num_parts, 2), clusters of (1, 2, 1).
inline cudaLaunchConfig_t pair_launch_config(int num_parts, int threads, int smem,
                                             cudaStream_t stream, cudaLaunchAttribute* cluster) {
  cluster->id = cudaLaunchAttributeClusterDimension;
  cluster->val.clusterDim.x = 1;
  cluster->val.clusterDim.y = 2;
  cluster->val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(num_parts), 2);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  config.attrs = cluster;
  config.numAttrs = 1;
  return config;
}

template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
int decode_pair_clusters() {
  using Shape = DecodeShape<kDqk, kRows, kBlockKeys>;
  using Traits = KvTraits<kFormat, kDqk>;
  if constexpr (!kCanPairHeadGroups<Shape, Traits>) {
    return 0;
  } else {
    auto kernel = portable_sparse_decode_kernel<Shape, Traits>;
    const int smem = decode_smem_bytes<kFormat, kDqk, kRows, kBlockKeys>();
    int device = 0, major = 0, clusters = 0;
    cudaFuncAttributes attributes;
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config =
        pair_launch_config(1, Shape::kThreads, smem, nullptr, &cluster);
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess || major < 9 ||
        attributes.ptxVersion < 90 || ensure_max_dynamic_smem(kernel, smem) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return clusters;
  }
}

template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
Status launch_portable_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  using Shape = DecodeShape<kDqk, kRows, kBlockKeys>;
  using Traits = KvTraits<kFormat, kDqk>;
  const int smem = decode_smem_bytes<kFormat, kDqk, kRows, kBlockKeys>();
  auto kernel = portable_sparse_decode_kernel<Shape, Traits>;
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(kernel, smem));
  if (launch.pair_head_groups) {
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config =
        pair_launch_config(launch.num_parts, Shape::kThreads, smem, stream, &cluster);
    SMLA_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, launch));
  } else {
    const int head_groups = decode_head_groups(launch.p.problem.h_q, kRows);
    const dim3 grid(static_cast<unsigned>(launch.num_parts), static_cast<unsigned>(head_groups));
    kernel<<<grid, Shape::kThreads, smem, stream>>>(launch);
  }
  return check_last_launch("portable_sparse_decode_kernel");
}

}  // namespace sparse_mla::cuda::portable_decode
