// The CUDA back end's kernel registry: one entry per kernel configuration this build compiled, in
// arrays generated from the kernel table (src/cuda/instantiations/kernels.py) by generate.py at
// configure time, sized there. kernel_tables.cpp dispatches over them; these are their element
// types and, for tests and tools, the arrays as spans.
//
// A build may hold part of the table (SMLA_KERNELS, cmake/kernels.cmake): the rows it does not
// hold are listed in absent_kernels(), with why, so that a problem that needs one gets an error
// that names it and the option to rebuild with.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "core/params.h"
#include "cuda/decode/launch.h"
#include "cuda/decode_launch_policy.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda {

// A portable sparse prefill tile (family portable_sparse_prefill).
struct PrefillEntry {
  const char* name;
  int d_qk, rows, block_keys;
  Status (*launch)(const detail::PrefillParams&, cudaStream_t);
  int (*smem)();  // dynamic shared memory, bytes
};

// The Hopper sparse prefill at one d_qk (family sm90a_sparse_prefill, sm_90a code only).
struct Sm90aPrefillEntry {
  const char* name;
  int d_qk;
  Status (*launch)(const detail::PrefillParams&, cudaStream_t);
  int (*smem)();  // dynamic shared memory, bytes
};

// The Hopper sparse decode for one cache format and d_qk (family sm90a_sparse_decode, sm_90a
// code only): 64 head rows per CTA, 64-key blocks, one CTA per SM.
struct Sm90aDecodeEntry {
  const char* name;
  KvCacheFormat format;
  int d_qk;
  Status (*launch)(const decode::DecodeLaunch&, cudaStream_t);
  int (*smem)();  // dynamic shared memory, bytes
};

// A portable sparse decode tile (family portable_sparse_decode): what the launch policy sees
// (decode_launch_policy.h), then the instantiation's functions.
struct DecodeEntry {
  DecodeTile tile;
  Status (*launch)(const decode::DecodeLaunch&, cudaStream_t);
  int (*smem)();
  int (*ctas_per_sm)();    // resident CTAs per SM on the current device; 0 = the query failed
  int (*pair_clusters)();  // resident 2-CTA clusters when paired; 0 = it cannot pair
};

// The pair_clusters of a tile that never pairs (16 rows: one head group per 16 heads).
inline int no_pair_clusters() { return 0; }

// A row of the kernel table that this build does not have.
struct AbsentKernel {
  const char* name;
  const char* family;
  KvCacheFormat format;  // kBf16 for prefill (it reads a bf16 KV)
  int d_qk, rows, block_keys;
  bool warp_specialized;
  const char* why;  // "SMLA_KERNELS=... does not select ...; rebuild with -DSMLA_KERNELS=..."
};

std::span<const PrefillEntry> portable_prefill_entries();
std::span<const Sm90aPrefillEntry> sm90a_prefill_entries();
std::span<const DecodeEntry> portable_decode_entries();
std::span<const Sm90aDecodeEntry> sm90a_decode_entries();
std::span<const AbsentKernel> absent_kernels();

// Why the kernels of `family` for (format, d_qk) are not in this build (AbsentKernel::why of the
// first such row), or nullptr when the kernel table has no such row.
const char* why_not_built(const char* family, KvCacheFormat format, int64_t d_qk);

}  // namespace sparse_mla::cuda
