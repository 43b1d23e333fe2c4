// The index union kernel (planning/index_union.h): one CTA per (request, list) builds the union
// of the request's tokens' lists in two passes over their entries. Pass 1 inserts every valid
// entry into an open-addressing hash table in shared memory (slot index -> token bits, atomicCAS
// on the key, atomicOr on the bits: the table's content does not depend on the order of the
// inserts, only where colliding keys land). Pass 2 walks the entries in (token, position) order
// in chunks of the CTA's threads, asks union_entry whether each is kept, and compacts the kept
// ones with a CTA-wide prefix sum, so the union's order is the same on every run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/device/block_scan.cuh"
#include "cuda/planning/launch.h"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/dynamic_smem.h"
#include "planning/index_union.h"

namespace sparse_mla::cuda {
namespace {

constexpr int kUnionThreads = 512;
constexpr int32_t kEmptyKey = -1;

struct UnionList {
  detail::IndexListParams list;  // topk 0: no such list
  int64_t num_slots;             // its cache's slots: valid iff 0 <= index < num_slots
  int32_t* indices;              // [b, capacity]
  uint8_t* bits;                 // [b, capacity]
  int32_t* count;                // [b]
  int64_t capacity;
};

struct UnionArgs {
  UnionList lists[2];  // main, extra (blockIdx.y)
  int32_t s_q;
  int32_t table_log2;  // the hash table holds 1 << table_log2 keys
};

// Fibonacci hashing: the top bits of index x 2^32 / phi.
__device__ __forceinline__ uint32_t table_home(int32_t index, int table_log2) {
  return (static_cast<uint32_t>(index) * 2654435761u) >> (32 - table_log2);
}

__global__ void __launch_bounds__(kUnionThreads) index_union_kernel(UnionArgs a) {
  const UnionList& u = a.lists[blockIdx.y];
  if (u.list.topk == 0) return;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t warp_sums[kUnionThreads / 32];
  __shared__ int64_t lengths[planning::kMaxUnionTokens];
  const uint32_t table_mask = (1u << a.table_log2) - 1u;
  int32_t* keys = reinterpret_cast<int32_t*>(smem);
  uint32_t* seen = reinterpret_cast<uint32_t*>(keys + table_mask + 1);
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x;
  for (uint32_t i = tid; i <= table_mask; i += kUnionThreads) {
    keys[i] = kEmptyKey;
    seen[i] = 0;
  }
  if (tid < a.s_q) lengths[tid] = detail::effective_topk(u.list, b, tid);
  __syncthreads();

  const int64_t topk = u.list.topk;
  const int64_t entries = a.s_q * topk;
  const int32_t* request = u.list.indices + b * u.list.indices_stride_b;
  // Entry j = (token j / topk, position j % topk): its slot index, or -1 where it is not valid.
  const auto entry = [&](int64_t j, int* token) {
    *token = static_cast<int>(j / topk);
    const int64_t k = j - *token * topk;
    if (j >= entries || k >= lengths[*token]) return kEmptyKey;
    const int32_t index = __ldg(request + *token * u.list.indices_stride_s + k);
    return index >= 0 && index < u.num_slots ? index : kEmptyKey;
  };
  for (int64_t j = tid; j < entries; j += kUnionThreads) {
    int token;
    const int32_t index = entry(j, &token);
    if (index == kEmptyKey) continue;
    uint32_t at = table_home(index, a.table_log2);
    for (;;) {
      const int32_t held = atomicCAS(&keys[at], kEmptyKey, index);
      if (held == kEmptyKey || held == index) break;
      at = (at + 1) & table_mask;
    }
    const uint32_t bit = 1u << token;
    if (atomicOr(&seen[at], bit) & bit) atomicOr(&seen[at], bit << 8);
  }
  __syncthreads();

  int32_t* out_indices = u.indices + b * u.capacity;
  uint8_t* out_bits = u.bits + b * u.capacity;
  int32_t kept = 0;  // the same in every thread: the scans' totals
  for (int64_t base = 0; base < entries; base += kUnionThreads) {
    int token;
    const int32_t index = entry(base + tid, &token);
    planning::UnionEntry e{false, 0};
    if (index != kEmptyKey) {
      uint32_t at = table_home(index, a.table_log2);
      while (keys[at] != index) at = (at + 1) & table_mask;
      e = planning::union_entry(seen[at], token);
    }
    int32_t chunk_kept;
    const int32_t to =
        kept + block_exclusive_scan<kUnionThreads>(e.keep ? 1 : 0, &chunk_kept, warp_sums);
    if (e.keep) {
      out_indices[to] = index;
      out_bits[to] = e.bits;
    }
    kept += chunk_kept;
  }
  for (int64_t k = kept + tid; k < u.capacity; k += kUnionThreads) {
    out_indices[k] = kEmptyKey;
    out_bits[k] = 0;
  }
  if (tid == 0) u.count[b] = kept;
}

int ceil_log2(int64_t n) {
  int log2 = 0;
  while ((int64_t{1} << log2) < n) ++log2;
  return log2;
}

}  // namespace

Status launch_index_union(const detail::DecodeParams& p, const planning::IndexUnionLayout& layout,
                          void* workspace, cudaStream_t stream) {
  const int64_t s_q = p.problem.s_q;
  const int64_t most_entries = s_q * std::max(p.list.topk, p.has_extra ? p.extra_list.topk : 0);
  if (s_q < 2 || s_q > planning::kMaxUnionTokens || most_entries > planning::kMaxUnionEntries ||
      workspace == nullptr) {
    return {StatusCode::kInternal, "launch_index_union: s_q = " + std::to_string(s_q) +
                                       " and s_q x topk = " + std::to_string(most_entries) +
                                       " are out of the union's range, or no workspace"};
  }
  const planning::IndexUnion ws = planning::carve_index_union(workspace, layout);
  UnionArgs args;
  args.lists[0] = {p.list, p.cache.num_slots(), ws.indices, ws.bits, ws.count, layout.capacity};
  args.lists[1] = {p.has_extra ? p.extra_list : detail::IndexListParams{},
                   p.has_extra ? p.extra_cache.num_slots() : 0,
                   ws.extra_indices,
                   ws.extra_bits,
                   ws.extra_count,
                   layout.extra_capacity};
  args.s_q = static_cast<int32_t>(s_q);
  // At most half full; at least a CTA's worth of keys.
  args.table_log2 = std::max(ceil_log2(2 * most_entries), 9);
  const int smem = (8 << args.table_log2);
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(index_union_kernel, smem));
  const dim3 grid(static_cast<unsigned>(p.problem.b), p.has_extra ? 2u : 1u);
  index_union_kernel<<<grid, kUnionThreads, smem, stream>>>(args);
  return check_last_launch("index_union_kernel");
}

}  // namespace sparse_mla::cuda
