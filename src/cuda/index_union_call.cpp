#include "cuda/index_union_call.h"

namespace sparse_mla::cuda {

Sm90aDecodeWorkspace sm90a_decode_workspace(const SparseDecodeProblem& problem,
                                            const SparseDecodeProblem& launched, int num_parts,
                                            bool over_union) {
  Sm90aDecodeWorkspace ws;
  ws.decode =
      planning::decode_workspace_layout(launched.b * launched.s_q, num_parts, launched.h_q, 512);
  ws.total_bytes = ws.decode.total_bytes;
  if (over_union) {
    ws.index_union =
        planning::index_union_layout(ws.decode.total_bytes, problem.b, problem.s_q, problem.topk,
                                     problem.has_extra ? problem.extra_topk : 0);
    ws.total_bytes = ws.index_union.end;
  }
  return ws;
}

detail::DecodeParams index_union_params(const detail::DecodeParams& params,
                                        const SparseDecodeProblem& launched,
                                        const planning::IndexUnionLayout& layout, void* workspace) {
  const planning::IndexUnion u = planning::carve_index_union(workspace, layout);
  detail::DecodeParams up = params;
  up.problem = launched;
  const auto union_list = [](int32_t* indices, int32_t* count, int64_t capacity) {
    detail::IndexListParams list;
    list.indices = indices;
    list.indices_stride_b = capacity;
    list.indices_stride_s = 0;
    list.topk = capacity;
    list.topk_length = count;
    list.topk_length_stride_b = 1;
    list.topk_length_stride_s = 0;
    return list;
  };
  up.list = union_list(u.indices, u.count, layout.capacity);
  if (params.has_extra) {
    up.extra_list = union_list(u.extra_indices, u.extra_count, layout.extra_capacity);
  }
  return up;
}

}  // namespace sparse_mla::cuda
