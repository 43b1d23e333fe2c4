// Host-side launcher of the portable sparse decode split kernel, one explicit instantiation per
// (cache format, d_qk, head rows, keys per block): a row of the kernel table
// (src/cuda/instantiations/kernels.py), whose generated units alone include kernel.cuh. The
// planner and the combine are separate launches (src/cuda/planning, src/cuda/combine);
// kernel_tables.cpp sequences the three.
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "cuda/decode/launch.h"
#include "cuda/decode_launch_policy.h"
#include "planning/decode_schedule.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda::portable_decode {

// The launch, a piece's inputs and its target (cuda/decode/), which the Hopper decode shares.
using namespace ::sparse_mla::cuda::decode;

// Head rows per CTA for h_q heads, and head-group CTAs per part (the grid's y): the launch
// policy's rule (cuda/decode_launch_policy.h), which the launchers' grids follow.
using cuda::decode_head_groups;
using cuda::decode_rows_for;

// The schedule's block (decode_schedule.h block_tokens) is the kernel's KV tile: kBlockKeys
// (64 or 32) slots.
template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
int decode_smem_bytes();

// CTAs of this configuration resident per SM on the current device (0 if the query fails).
template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
int decode_ctas_per_sm();

// Clusters of two head-group CTAs that can be resident at once when the configuration is launched
// paired (DecodeLaunch::pair_head_groups), or 0 where it cannot be: a bf16 cache (nothing to
// share), a device below sm_90, or kernel code not compiled for sm_90+ (cluster instructions).
template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
int decode_pair_clusters();

template <KvCacheFormat kFormat, int kDqk, int kRows, int kBlockKeys>
Status launch_portable_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream);

// The warp-specialised split kernel (warp_specialized_kernel.cuh): the 16-row x 32-key tile of an
// FP8 cache (kV32Fp8 at 576, kV4Fp8 at 512) with producer warps, one CTA of 512 threads per SM.
// Same launch (grid (num_parts, head groups)), schedule and workspace as the 16 x 32 split kernel.
template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_smem_bytes();

template <KvCacheFormat kFormat, int kDqk>
int warp_specialized_decode_ctas_per_sm();

template <KvCacheFormat kFormat, int kDqk>
Status launch_warp_specialized_decode(const DecodeLaunch& launch, cudaStream_t stream);

// The V4.1 split kernel (v41_kernel.cuh): a v41_fp8 main cache (d_qk 512) with an optional
// v41_fp8 or v41_fp4 extra cache, each cache in either page layout (read from the call's
// KvCacheParams). Same launch (grid (num_parts, head groups)), schedule and workspace as the split
// kernel; never paired.
template <int kRows, int kBlockKeys>
int v41_decode_smem_bytes();

template <int kRows, int kBlockKeys>
int v41_decode_ctas_per_sm();

template <int kRows, int kBlockKeys>
Status launch_v41_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream);

// Its warp-specialised 16 x 32 tile (v41_warp_specialized_kernel.cuh; kRows 16, kBlockKeys 32):
// the warp-specialised kernel's roles and launch with the V4.1 producers.
template <int kRows, int kBlockKeys>
int v41_warp_specialized_decode_smem_bytes();

template <int kRows, int kBlockKeys>
int v41_warp_specialized_decode_ctas_per_sm();

template <int kRows, int kBlockKeys>
Status launch_v41_warp_specialized_decode(const DecodeLaunch& launch, cudaStream_t stream);

}  // namespace sparse_mla::cuda::portable_decode
