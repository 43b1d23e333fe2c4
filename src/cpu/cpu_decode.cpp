// CPU back end, sparse decode: per ((b, s) query, head group) task, dequantize the cache rows of
// the valid main-list slots and then of the valid extra-list slots into AttentionTile's fp32
// tile; both lists feed the same online softmax, so they form one softmax as SPEC §3 asks.
#include "cpu/cpu_backend.h"
#include "cpu/row_gather.h"

namespace sparse_mla::cpu {
namespace {

// Feeds the valid slots of one index list of query (b, s) into the tile, prefetching the rows
// kPrefetchRows slots ahead.
void gather_list(const detail::KvCacheParams& cache, const detail::IndexListParams& list, int64_t b,
                 int64_t s, AttentionTile* tile) {
  const CacheRowReader reader(cache);
  const int64_t num_slots = cache.num_slots();
  const int64_t length = detail::effective_topk(list, b, s);
  const int32_t* indices = list.indices + b * list.indices_stride_b + s * list.indices_stride_s;
  for (int64_t k = 0; k < std::min<int64_t>(length, kPrefetchRows); ++k) {
    if (indices[k] >= 0 && indices[k] < num_slots) reader.prefetch(indices[k]);
  }
  for (int64_t k = 0; k < length; ++k) {
    if (k + kPrefetchRows < length) {
      const int32_t ahead = indices[k + kPrefetchRows];
      if (ahead >= 0 && ahead < num_slots) reader.prefetch(ahead);
    }
    const int32_t slot = indices[k];
    if (slot < 0 || slot >= num_slots) continue;
    reader.read(slot, tile->row());
    tile->commit_row();
  }
}

}  // namespace

Status cpu_sparse_decode(const detail::DecodeParams& p, const RunOptions& options) {
  const SparseDecodeProblem& pr = p.problem;
  const int64_t num_queries = pr.b * pr.s_q;
  const WorkSplit split = split_work(num_queries, pr.h_q, options.num_threads);
  std::vector<std::unique_ptr<AttentionTile>> tiles;
  SMLA_RETURN_IF_ERROR(make_tiles(split, static_cast<int>(pr.d_qk), &tiles));

  parallel_for(num_queries * split.head_groups, split.workers, [&](int64_t task, int worker) {
    AttentionTile& tile = *tiles[worker];
    const int64_t query = task / split.head_groups;
    const int64_t b = query / pr.s_q, s = query % pr.s_q;
    const int64_t h0 = task % split.head_groups * split.heads_per_group;
    const int heads = static_cast<int>(std::min<int64_t>(split.heads_per_group, pr.h_q - h0));
    tile.begin(p.q + b * p.q_stride_b + s * p.q_stride_s + h0 * p.q_stride_h, p.q_stride_h, heads,
               p.softmax_scale);
    gather_list(p.cache, p.list, b, s, &tile);
    if (p.has_extra) gather_list(p.extra_cache, p.extra_list, b, s, &tile);
    tile.finish(
        p.attn_sink != nullptr ? p.attn_sink + h0 * p.attn_sink_stride : nullptr,
        p.attn_sink_stride, p.out + b * p.out_stride_b + s * p.out_stride_s + h0 * p.out_stride_h,
        p.out_stride_h, p.lse + b * p.lse_stride_b + s * p.lse_stride_s + h0 * p.lse_stride_h,
        p.lse_stride_h, nullptr, 0);
  });
  return {};
}

}  // namespace sparse_mla::cpu
