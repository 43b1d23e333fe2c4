// Portable (sm_80+) sparse decode split kernel over DeepSeek V4.1 caches (SPEC §3, §4): a v41_fp8
// main cache and an optional v41_fp8 or v41_fp4 extra cache, each in page_split or
// token_interleaved layout and with its own page size. Same grid, schedule, MMA cores and piece
// store as the split kernel of the other formats (kernel.cuh); what differs is the block's rows:
//   stage       the slot's data row and scale row, addressed with the V41Traits of its cache's
//               format and layout (a CTA-uniform branch per block: main blocks read the main
//               cache's traits, extra blocks the extra cache's);
//   gather      the record's value bytes (512 / 256) and scale bytes (16 / 32) with cp.async into
//               one raw row [values | scales] of kRawPitch = 528 bytes (the larger record);
//   dequantise  v41_fp8: 8 e4m3 x their ue8m0 scale per 16-B chunk (as v4_fp8); v41_fp4: 8 e2m1
//               codes (4 bytes) x their e4m3 scale as an exact bf16x2 product (fp4_dequant.cuh).
// Invalid slots point at slot 0 of their cache and are zero-filled (value and scale bytes 0, so
// they dequantise to 0), never read. No paired head groups and no warp-specialised variant: the
// plain split kernel, for every tile of the kernel table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.h"
#include "cuda/device/fp4_dequant.cuh"
#include "cuda/device/fp8_dequant.cuh"
#include "cuda/device/gather.cuh"
#include "cuda/device/kv_cache_traits.cuh"
#include "cuda/device/online_softmax.cuh"
#include "cuda/device/ptx/cp_async.cuh"
#include "cuda/portable/sparse_decode/config.cuh"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_decode/mma_core.cuh"
#include "cuda/portable/sparse_decode/piece_inputs.cuh"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda::portable_decode {

// The raw stage's row as DecodeSmem sees it: 512 value bytes then a 16-B scale row (RawRow: pitch
// 528 = the v41_fp8 record, the larger of the two), a scale pointer per row. A v41_fp4 row uses its
// first 288 bytes: 256 code bytes, then 32 scale bytes at kFp4ScaleBase.
struct V41RawRecord {
  static constexpr KvCacheFormat kFormat = KvCacheFormat::kV41Fp8;
  static constexpr int kDqk = 512;
  static constexpr int kQuantDims = 512;
  static constexpr int kTileSize = 32;
  static constexpr int kNumScales = 16;
  static constexpr ScaleEncoding kScaleEncoding = ScaleEncoding::kUe8m0;
  static constexpr bool kScalesInRow = false;
  static constexpr int kScaleOffset = 0;
  static constexpr int kScaleRowBytes = 16;
  static constexpr int kDataRowBytes = 512;
  static constexpr int kTailOffset = 512;
  static constexpr int kTailDims = 0;
};
static_assert(RawRow<V41RawRecord>::kPitch ==
              V41Traits<KvCacheFormat::kV41Fp8, KvLayout::kPageSplit>::kRecordBytes);

template <class Shape>
using V41Smem = DecodeSmem<Shape, V41RawRecord>;

template <bool kFp4>
using V41Record =
    V41Traits<kFp4 ? KvCacheFormat::kV41Fp4 : KvCacheFormat::kV41Fp8, KvLayout::kTokenInterleaved>;

// load (addresses) of one slot with the traits of (format, layout): page_split's data and scale
// rows (slot_rows), or token_interleaved's record and the scales inside it.
template <class Traits>
__device__ __forceinline__ SlotRows v41_slot_rows(const detail::KvCacheParams& cache,
                                                  uint32_t slot) {
  SlotRows rows = slot_rows<Traits>(cache, slot);
  if constexpr (Traits::kScalesInRow) rows.scales = rows.data + Traits::kScaleOffset;
  return rows;
}

// Whether block `block` of a query reads v41_fp4 records (extra blocks of a v41_fp4 extra cache).
__device__ __forceinline__ bool block_is_fp4(const detail::DecodeParams& p, const QueryLists& lists,
                                             int block) {
  return block >= lists.blocks_main && p.extra_cache.format == KvCacheFormat::kV41Fp4;
}

// load (addresses): threads 0..kBlockKeys-1 resolve slot `thread` of block `block`.
template <class Shape>
__device__ __forceinline__ void stage_v41_rows(const detail::DecodeParams& p,
                                               const QueryLists& lists, int block, int step,
                                               int thread, int32_t index, V41Smem<Shape>& sm) {
  if (thread >= Shape::kBlockKeys) return;
  const bool is_main = block < lists.blocks_main;
  const detail::KvCacheParams& cache = is_main ? p.cache : p.extra_cache;
  const bool valid = index >= 0 && index < cache.num_blocks * cache.page_block_size;
  const uint32_t slot = valid ? static_cast<uint32_t>(index) : 0u;
  const bool split = cache.layout == KvLayout::kPageSplit;
  using enum KvCacheFormat;
  using enum KvLayout;
  SlotRows rows;
  if (cache.format == kV41Fp4) {
    rows = split ? v41_slot_rows<V41Traits<kV41Fp4, kPageSplit>>(cache, slot)
                 : v41_slot_rows<V41Traits<kV41Fp4, kTokenInterleaved>>(cache, slot);
  } else {
    rows = split ? v41_slot_rows<V41Traits<kV41Fp8, kPageSplit>>(cache, slot)
                 : v41_slot_rows<V41Traits<kV41Fp8, kTokenInterleaved>>(cache, slot);
  }
  sm.row_ptr[thread] = rows.data;
  sm.scale_ptr[thread] = rows.scales;
  sm.valid[step & 1][thread] = valid ? 1 : 0;
}

// load (rows): every row's value bytes, then its scale bytes, into the raw stage
// [kBlockKeys, 528] as [values | scales]; invalid rows zero-filled.
template <class Shape, bool kFp4>
__device__ __forceinline__ void gather_v41_rows(int step, int thread, V41Smem<Shape>& sm) {
  using Record = V41Record<kFp4>;
  constexpr int kPitch = RawRow<V41RawRecord>::kPitch;
  const uint8_t* valid = sm.valid[step & 1];
  const uint32_t raw = smem_u32(sm.raw[0]);
  gather_rows_linear<Shape::kBlockKeys, Record::kQuantBytes / 16, kPitch, Shape::kThreads>(
      raw, thread, [&](int r) {
        return RowSource{sm.row_ptr[r], valid[r] != 0};
      });
  gather_rows_linear<Shape::kBlockKeys, Record::kNumScales / 16, kPitch, Shape::kThreads>(
      raw + Record::kQuantBytes, thread, [&](int r) {
        return RowSource{sm.scale_ptr[r], valid[r] != 0};
      });
}

// dequantise: the raw stage -> the swizzled bf16 tile sm.kv[0]. Thread t owns chunk c = t % 64 (8
// dims) of rows r0 + kRowsPerPass * i (r0 = t / 64), as dequantize_rows (raw_rows.cuh) does for
// the other FP8 formats, 4 rows' raw bytes and scales loaded before they are converted and stored.
// v41_fp8: 8 e4m3 bytes at 8 c, ue8m0 scale byte 512 + c / 4. v41_fp4: 4 code bytes at 4 c, e4m3
// scale byte 256 + c / 2.
template <class Shape, bool kFp4>
__device__ __forceinline__ void dequantize_v41_rows(int thread, V41Smem<Shape>& sm) {
  using Record = V41Record<kFp4>;
  constexpr int kPitch = RawRow<V41RawRecord>::kPitch;
  constexpr int kLanes = 64;
  constexpr int kRowsPerPass = Shape::kThreads / kLanes;
  constexpr int kRows = Shape::kBlockKeys;
  static_assert(Shape::kChunksPerRow == kLanes, "512 dims = 64 chunks, all quantized");
  static_assert(kRowsPerPass == 2 || kRowsPerPass == 4, "the swizzle phases assume 2 or 4");
  constexpr int kRowsPerThread = kRows / kRowsPerPass;
  constexpr int kBatch = 4;
  static_assert(kRowsPerThread % kBatch == 0);
  uint8_t* tile = sm.kv[0];
  const int chunk = thread % kLanes;
  const int row0 = thread / kLanes;
  const uint32_t column_base =
      static_cast<uint32_t>((chunk >> 3) * (Shape::kBlockKeys * 128) + row0 * 128);
  const uint32_t swizzle = static_cast<uint32_t>(((chunk & 7) ^ (row0 & 7)) << 4);
  auto tile_offset = [&](int i) {
    return column_base + static_cast<uint32_t>(128 * kRowsPerPass * i) +
           (swizzle ^ static_cast<uint32_t>(((kRowsPerPass * i) & 7) << 4));
  };
  const uint8_t* raw_rows = sm.raw[0] + row0 * kPitch;
  const uint8_t* scales = raw_rows + Record::kQuantBytes + chunk * 8 / Record::kTileSize;
  constexpr int kStep = kRowsPerPass * kPitch;
#pragma unroll
  for (int i0 = 0; i0 < kRowsPerThread; i0 += kBatch) {
    uint2 raw[kBatch];
    uint32_t scale_byte[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j;
      if constexpr (kFp4) {
        raw[j].x = *reinterpret_cast<const uint32_t*>(raw_rows + 4 * chunk + i * kStep);
      } else {
        raw[j] = *reinterpret_cast<const uint2*>(raw_rows + 8 * chunk + i * kStep);
      }
      scale_byte[j] = scales[i * kStep];
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      uint4 value;
      if constexpr (kFp4) {
        value = dequant_e2m1x8(raw[j].x, e4m3_scale_bf16x2(scale_byte[j]));
      } else {
        value = dequant_e4m3x8(raw[j], ue8m0_to_float(scale_byte[j]));
      }
      *reinterpret_cast<uint4*>(tile + tile_offset(i0 + j)) = value;
    }
  }
}

template <class Shape>
__device__ __forceinline__ void gather_v41_block(const detail::DecodeParams& p,
                                                 const QueryLists& lists, int block, int step,
                                                 int thread, V41Smem<Shape>& sm) {
  if (block_is_fp4(p, lists, block)) {
    gather_v41_rows<Shape, true>(step, thread, sm);
  } else {
    gather_v41_rows<Shape, false>(step, thread, sm);
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
        dequantize_v41_rows<Shape, true>(thread, sm);
      } else {
        dequantize_v41_rows<Shape, false>(thread, sm);
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
