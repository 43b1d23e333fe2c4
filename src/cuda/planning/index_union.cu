// The index union kernel (planning/index_union.h): one CTA per (request, list) builds the union
// of the request's tokens' lists. The entries are staged in shared memory first (every load
// issued before the first use: one memory latency, not one per pass or chunk), then inserted into
// an open-addressing hash table in shared memory (slot index -> token bits, atomicCAS on the key,
// atomicOr on the bits: the table's content does not depend on the order of the inserts, only
// where colliding keys land), then each thread walks a contiguous range of the entries in
// (token, position) order, asks union_entry whether each is kept, and one CTA-wide prefix sum of
// the threads' counts places the kept ones, so the union's order is the same on every run.
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

// Dynamic shared memory: keys [table], token bits [table], the staged entries [s_q x topk].
__global__ void __launch_bounds__(kUnionThreads) index_union_kernel(UnionArgs a) {
  const UnionList& u = a.lists[blockIdx.y];
  if (u.list.topk == 0) return;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int32_t warp_sums[kUnionThreads / 32];
  const uint32_t table_mask = (1u << a.table_log2) - 1u;
  int32_t* keys = reinterpret_cast<int32_t*>(smem);
  uint32_t* seen = reinterpret_cast<uint32_t*>(keys + table_mask + 1);
  int32_t* staged = reinterpret_cast<int32_t*>(seen + table_mask + 1);
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x;
  const int topk = static_cast<int>(u.list.topk);
  const int entries = a.s_q * topk;
  for (uint32_t i = tid; i <= table_mask; i += kUnionThreads) {
    keys[i] = kEmptyKey;
    seen[i] = 0;
  }
  // Entry t x topk + k: token t's list position k, its slot index or -1 where it is not valid.
  const int32_t* request = u.list.indices + b * u.list.indices_stride_b;
  for (int t = 0; t < a.s_q; ++t) {
    const int64_t length = detail::effective_topk(u.list, b, t);
    const int32_t* list = request + t * u.list.indices_stride_s;
#pragma unroll 4
    for (int k = tid; k < topk; k += kUnionThreads) {
      const int32_t index = k < length ? __ldg(list + k) : kEmptyKey;
      staged[t * topk + k] = index >= 0 && index < u.num_slots ? index : kEmptyKey;
    }
  }
  __syncthreads();
  for (int j = tid; j < entries; j += kUnionThreads) {
    const int32_t index = staged[j];
    if (index == kEmptyKey) continue;
    uint32_t at = table_home(index, a.table_log2);
    for (;;) {
      const int32_t held = atomicCAS(&keys[at], kEmptyKey, index);
      if (held == kEmptyKey || held == index) break;
      at = (at + 1) & table_mask;
    }
    const uint32_t bit = 1u << (j / topk);
    if (atomicOr(&seen[at], bit) & bit) atomicOr(&seen[at], bit << 8);
  }
  __syncthreads();

  // The thread's entries [begin, end) in order; what union_entry says of entry j.
  const int per_thread = (entries + kUnionThreads - 1) / kUnionThreads;
  const int begin = min(entries, tid * per_thread), end = min(entries, begin + per_thread);
  const auto kept = [&](int j) {
    const int32_t index = staged[j];
    if (index == kEmptyKey) return planning::UnionEntry{false, 0};
    uint32_t at = table_home(index, a.table_log2);
    while (keys[at] != index) at = (at + 1) & table_mask;
    return planning::union_entry(seen[at], j / topk);
  };
  int32_t own = 0;
  for (int j = begin; j < end; ++j) own += kept(j).keep ? 1 : 0;
  int32_t total;
  int32_t to = block_exclusive_scan<kUnionThreads>(own, &total, warp_sums);
  int32_t* out_indices = u.indices + b * u.capacity;
  uint8_t* out_bits = u.bits + b * u.capacity;
  for (int j = begin; j < end; ++j) {
    const planning::UnionEntry e = kept(j);
    if (!e.keep) continue;
    out_indices[to] = staged[j];
    out_bits[to] = e.bits;
    ++to;
  }
  for (int64_t k = total + tid; k < u.capacity; k += kUnionThreads) {
    out_indices[k] = kEmptyKey;
    out_bits[k] = 0;
  }
  if (tid == 0) u.count[b] = total;
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
  const int smem = (8 << args.table_log2) + 4 * static_cast<int>(most_entries);
  SMLA_CUDA_RETURN_IF_ERROR(ensure_max_dynamic_smem(index_union_kernel, smem));
  const dim3 grid(static_cast<unsigned>(p.problem.b), p.has_extra ? 2u : 1u);
  index_union_kernel<<<grid, kUnionThreads, smem, stream>>>(args);
  return check_last_launch("index_union_kernel");
}

}  // namespace sparse_mla::cuda
