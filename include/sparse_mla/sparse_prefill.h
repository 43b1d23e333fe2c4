// Sparse MLA prefill (SPEC §2): every query token attends to its own top-k bf16 KV rows.
//
//   q           [s_q, h_q, d_qk]     bf16, last dim contiguous, other strides free
//   kv          [s_kv, 1, d_qk]      bf16, last dim contiguous
//   indices     [s_q, 1, topk]       int32, last dim contiguous; valid iff 0 <= idx < s_kv and
//                                    k < topk_length[i]; invalid slots are never read
//   attn_sink   [h_q]                fp32, optional (finite, -inf = none, +inf = out 0)
//   topk_length [s_q]                int32, optional
//   out         [s_q, h_q, d_v]      bf16, last dim contiguous (d_v = 512)
//   max_logits  [s_q, h_q]           fp32
//   lse         [s_q, h_q]           fp32, natural log; +inf (and max_logits -inf, out 0) for a
//                                    query with no valid slot
// d_qk is 576 (V3.2) or 512 (V4); h_q is 1..128; topk >= 1.
#pragma once

#include <optional>

#include "sparse_mla/backend.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla {

struct SparsePrefillArgs {
  TensorView q;
  TensorView kv;
  TensorView indices;
  float sm_scale = 0.0f;  // required (no default in this op); must be finite and > 0
  int d_v = 512;
  std::optional<TensorView> attn_sink;
  std::optional<TensorView> topk_length;
  TensorView out;
  TensorView max_logits;
  TensorView lse;
};

// The problem a prefill call poses, without pointers: used for kernel selection and listing.
struct SparsePrefillProblem {
  int64_t s_q = 0, s_kv = 0, h_q = 0, d_qk = 0, d_v = 512, topk = 0;
  bool has_attn_sink = false;
  bool has_topk_length = false;
  Device device{};
};

Status sparse_prefill(const SparsePrefillArgs& args, const RunOptions& options = {});

}  // namespace sparse_mla
