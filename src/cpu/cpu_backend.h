// Entry points of the threaded CPU back end (registered in kernel_tables.cpp) and the work split
// that prefill and decode share: one task = one query (prefill token or decode (b, s) pair) and
// one group of its heads, run by AttentionTile on a pool of RunOptions::num_threads workers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/params.h"
#include "cpu/attention_tile.h"
#include "cpu/parallel_for.h"
#include "sparse_mla/backend.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cpu {

Status cpu_sparse_prefill(const detail::PrefillParams& params, const RunOptions& options);
Status cpu_sparse_decode(const detail::DecodeParams& params, const RunOptions& options);

struct WorkSplit {
  int64_t head_groups = 1;  // tasks per query
  int heads_per_group = 1;  // the last group may hold fewer
  int workers = 1;
};

// Queries are the unit of work. Only when there are fewer than two queries per worker are the
// heads split as well: every head group gathers the query's rows again, so groups keep at least
// 8 heads (two register blocks) and there are just enough tasks for the workers.
inline WorkSplit split_work(int64_t num_queries, int64_t h_q, int requested_threads) {
  WorkSplit split;
  if (num_queries <= 0 || h_q <= 0) {  // an empty call (b = 0 or s_q = 0): nothing to split
    split.heads_per_group = static_cast<int>(std::max<int64_t>(h_q, 1));
    return split;
  }
  const int64_t max_workers = worker_count(INT64_MAX, requested_threads);
  int64_t groups = 1;
  if (num_queries < 2 * max_workers) {
    groups =
        std::clamp<int64_t>((2 * max_workers + num_queries - 1) / num_queries, 1, (h_q + 7) / 8);
  }
  const int64_t per_group = std::min<int64_t>(h_q, ((h_q + groups - 1) / groups + 3) / 4 * 4);
  split.heads_per_group = static_cast<int>(per_group);
  split.head_groups = (h_q + per_group - 1) / per_group;
  split.workers = worker_count(num_queries * split.head_groups, requested_threads);
  return split;
}

// One AttentionTile per worker; an error Status (not an exception) when memory runs out.
inline Status make_tiles(const WorkSplit& split, int d_qk,
                         std::vector<std::unique_ptr<AttentionTile>>* tiles) {
  try {
    for (int w = 0; w < split.workers; ++w) {
      tiles->push_back(std::make_unique<AttentionTile>(d_qk, split.heads_per_group));
    }
  } catch (const std::bad_alloc&) {
    return {StatusCode::kDeviceError, "cpu back end: out of host memory for " +
                                          std::to_string(split.workers) + " worker tiles"};
  }
  return {};
}

}  // namespace sparse_mla::cpu
