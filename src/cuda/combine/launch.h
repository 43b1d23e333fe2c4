// Split-KV combine of sparse decode: merges the partial results of every query that the schedule
// split over several parts into its bf16 `out` and natural-log `lse` (applying the attention sink
// once). Queries processed whole were written by the split kernel and are left untouched.
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda {

// `workspace` is laid out by decode_workspace_layout(b*s_q, num_parts, h_q, d_v) and holds the
// schedule's split_offsets and the partial results (partial_lse log2 domain, partial_out
// normalised per piece). Needs no host synchronisation: a grid over all queries whose CTAs of
// unsplit queries exit at once. d_v must be 512. heads_per_token > 0: `p` is an index union's
// call (cuda/decode/launch.h, IndexUnionRows), whose head r is
// head r % heads_per_token of token r / heads_per_token of the request.
Status launch_split_combine(const detail::DecodeParams& p, int num_parts, const void* workspace,
                            cudaStream_t stream, int heads_per_token = 0);

}  // namespace sparse_mla::cuda
