// CPU back end, sparse prefill: per (query token, head group) task, gather the bf16 rows of the
// valid slots into AttentionTile's fp32 tile (invalid slots are skipped, never read; rows are
// prefetched a few slots ahead) and let the tile's blocked GEMMs and online softmax do the rest.
#include "cpu/cpu_backend.h"
#include "cpu/row_gather.h"

namespace sparse_mla::cpu {

Status cpu_sparse_prefill(const detail::PrefillParams& p, const RunOptions& options) {
  const SparsePrefillProblem& pr = p.problem;
  const int d_qk = static_cast<int>(pr.d_qk);
  const WorkSplit split = split_work(pr.s_q, pr.h_q, options.num_threads);
  std::vector<std::unique_ptr<AttentionTile>> tiles;
  SMLA_RETURN_IF_ERROR(make_tiles(split, d_qk, &tiles));

  parallel_for(pr.s_q * split.head_groups, split.workers, [&](int64_t task, int worker) {
    AttentionTile& tile = *tiles[worker];
    const int64_t i = task / split.head_groups;
    const int64_t h0 = task % split.head_groups * split.heads_per_group;
    const int heads = static_cast<int>(std::min<int64_t>(split.heads_per_group, pr.h_q - h0));
    tile.begin(p.q + i * p.q_stride_s + h0 * p.q_stride_h, p.q_stride_h, heads, p.sm_scale);

    const int64_t length = detail::effective_topk(p, i);
    const int32_t* list = p.indices + i * p.indices_stride_s;
    const int64_t row_bytes = int64_t{d_qk} * 2;
    auto prefetch = [&](int64_t k) {
      const int32_t idx = list[k];
      if (idx >= 0 && idx < pr.s_kv) {
        prefetch_bytes(reinterpret_cast<const uint8_t*>(p.kv + idx * p.kv_stride_s), row_bytes);
      }
    };
    for (int64_t k = 0; k < std::min<int64_t>(length, kPrefetchRows); ++k) prefetch(k);
    for (int64_t k = 0; k < length; ++k) {
      if (k + kPrefetchRows < length) prefetch(k + kPrefetchRows);
      const int32_t idx = list[k];
      if (idx < 0 || idx >= pr.s_kv) continue;
      bf16_to_float_row(p.kv + idx * p.kv_stride_s, d_qk, tile.row());
      tile.commit_row();
    }
    tile.finish(p.attn_sink != nullptr ? p.attn_sink + h0 * p.attn_sink_stride : nullptr,
                p.attn_sink_stride, p.out + i * p.out_stride_s + h0 * p.out_stride_h,
                p.out_stride_h, p.lse + i * p.lse_stride_s + h0 * p.lse_stride_h, p.lse_stride_h,
                p.max_logits + i * p.max_logits_stride_s + h0 * p.max_logits_stride_h,
                p.max_logits_stride_h);
  });
  return {};
}

}  // namespace sparse_mla::cpu
