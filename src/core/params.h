// Validated, pointer-level descriptions of one call, handed from src/core to the back ends.
// Everything here has passed validation (validate.h): ranks, dtypes, shapes, devices, strides,
// alignment. Strides are in elements of the tensor's own dtype; KV caches are addressed in bytes.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"

namespace sparse_mla::detail {

using bf16_bits = uint16_t;  // bf16 as raw bits on the host side

struct PrefillParams {
  SparsePrefillProblem problem;
  float sm_scale = 0.0f;
  const bf16_bits* q = nullptr;  // [s_q, h_q, d_qk]
  int64_t q_stride_s = 0, q_stride_h = 0;
  const bf16_bits* kv = nullptr;  // [s_kv, 1, d_qk]
  int64_t kv_stride_s = 0;
  const int32_t* indices = nullptr;  // [s_q, 1, topk]
  int64_t indices_stride_s = 0;
  const float* attn_sink = nullptr;  // [h_q] or nullptr
  int64_t attn_sink_stride = 0;
  const int32_t* topk_length = nullptr;  // [s_q] or nullptr
  int64_t topk_length_stride = 0;
  bf16_bits* out = nullptr;  // [s_q, h_q, d_v]
  int64_t out_stride_s = 0, out_stride_h = 0;
  float* max_logits = nullptr;  // [s_q, h_q]
  int64_t max_logits_stride_s = 0, max_logits_stride_h = 0;
  float* lse = nullptr;  // [s_q, h_q]
  int64_t lse_stride_s = 0, lse_stride_h = 0;
};

// One paged cache, addressed in bytes (see kv_cache_format.h for the layouts).
struct KvCacheParams {
  const uint8_t* data = nullptr;
  KvCacheFormat format = KvCacheFormat::kV32Fp8;
  KvLayout layout = KvLayout::kTokenInterleaved;  // resolved: never kDefault
  int64_t num_blocks = 0;
  int64_t page_block_size = 0;
  int64_t block_stride_bytes = 0;
  int d_qk = 0;
  int64_t num_slots() const { return num_blocks * page_block_size; }
};

// One index list with its optional lengths.
struct IndexListParams {
  const int32_t* indices = nullptr;  // [b, s_q, topk]
  int64_t indices_stride_b = 0, indices_stride_s = 0;
  int64_t topk = 0;
  const int32_t* topk_length = nullptr;  // [b] or [b, s_q], or nullptr
  int64_t topk_length_stride_b = 0;
  int64_t topk_length_stride_s = 0;  // 0 for a per-request [b] tensor
};

struct DecodeParams {
  SparseDecodeProblem problem;
  float softmax_scale = 0.0f;
  const bf16_bits* q = nullptr;  // [b, s_q, h_q, d_qk]
  int64_t q_stride_b = 0, q_stride_s = 0, q_stride_h = 0;
  KvCacheParams cache;
  IndexListParams list;
  bool has_extra = false;
  KvCacheParams extra_cache;
  IndexListParams extra_list;
  const float* attn_sink = nullptr;  // [h_q] or nullptr
  int64_t attn_sink_stride = 0;
  bf16_bits* out = nullptr;  // [b, s_q, h_q, d_v]
  int64_t out_stride_b = 0, out_stride_s = 0, out_stride_h = 0;
  float* lse = nullptr;  // [b, s_q, h_q]
  int64_t lse_stride_b = 0, lse_stride_s = 0, lse_stride_h = 0;
};

// The list-length rule of SPEC (topk_length clamped to [0, topk]), in one place for the host
// back ends and the CUDA kernels (prefill kernels, decode split kernel, decode planner).
// Prefill: the attended prefix of query token i's list.
inline SMLA_HOST_DEVICE int64_t effective_topk(const PrefillParams& p, int64_t i) {
  if (p.topk_length == nullptr) return p.problem.topk;
  const int64_t n = p.topk_length[i * p.topk_length_stride];
  return n < 0 ? 0 : (n > p.problem.topk ? p.problem.topk : n);
}

// Number of valid slots of list position k for query (b, s): applies topk_length only.
inline SMLA_HOST_DEVICE int64_t effective_topk(const IndexListParams& list, int64_t b, int64_t s) {
  if (list.topk_length == nullptr) return list.topk;
  int64_t n = list.topk_length[b * list.topk_length_stride_b + s * list.topk_length_stride_s];
  return n < 0 ? 0 : (n > list.topk ? list.topk : n);
}

}  // namespace sparse_mla::detail
