// Sparse MLA decode over a paged KV cache (SPEC §3), with explicit planning.
//
//   q                 [b, s_q, h_q, d_qk]  bf16, last dim contiguous
//   kv_cache          paged cache (kv_cache_format.h); d_qk 576 (v32_fp8), 512 (v4_fp8), bf16 any
//   indices           [b, s_q, topk]       int32, physical slot = block*page_block_size + offset;
//                                          valid iff 0 <= idx < num_blocks*page_block_size
//   topk_length       [b] or [b, s_q]      int32, optional (per request / per query token)
//   attn_sink         [h_q]                fp32, optional
//   extra_kv_cache    second cache, own page size and block count, optional: the main cache's
//                     format, or with a v41_fp8 main cache v41_fp8 or v41_fp4 (either layout)
//   extra_indices     [b, s_q, extra_topk] int32, required iff extra_kv_cache
//   extra_topk_length [b] or [b, s_q]      int32, optional, only with extra_kv_cache
//   out               [b, s_q, h_q, d_v]   bf16 (d_v = 512)
//   lse               [b, s_q, h_q]        fp32, natural log, +inf for a query with no valid slot
// The valid slots of both lists form one softmax.
//
// Use: plan once per decode step (shapes only, host side, no device work), allocate
// `plan.workspace_bytes` on the tensors' device, then call sparse_decode for every layer. The first
// call of a step passes DecodeSchedule::kBuild: it computes the split schedule on the device from
// the device-resident topk lengths (no host synchronisation); later layers of the same step pass
// kReuse. The whole sequence can be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "sparse_mla/backend.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla {

struct SparseDecodeArgs {
  TensorView q;
  KvCacheView kv_cache;
  TensorView indices;
  std::optional<TensorView> topk_length;
  std::optional<TensorView> attn_sink;
  std::optional<KvCacheView> extra_kv_cache;
  std::optional<TensorView> extra_indices;
  std::optional<TensorView> extra_topk_length;
  std::optional<float> softmax_scale;  // default d_qk ** -0.5; must be finite and > 0
  int d_v = 512;
  TensorView out;
  TensorView lse;
};

// The shape of a decode call, without pointers: what a plan is made for.
struct SparseDecodeProblem {
  int64_t b = 0, s_q = 0, h_q = 0, d_qk = 0, d_v = 512, topk = 0;
  KvCacheFormat format = KvCacheFormat::kV32Fp8;
  KvLayout kv_layout = KvLayout::kDefault;  // kDefault = the format's own layout
  int64_t page_block_size = 0;
  bool has_topk_length = false;
  bool topk_length_per_token = false;  // [b, s_q] rather than [b]
  bool has_attn_sink = false;
  bool has_extra = false;
  int64_t extra_topk = 0;
  // The extra cache's format (nullopt: the main cache's) and layout (kDefault: its format's own).
  // Only a v41_fp8 main cache takes another: v41_fp4. plan_sparse_decode and
  // describe_sparse_decode store problems normalized (layouts resolved, extra_format set iff
  // has_extra), so a hand-built problem and a described one compare equal.
  std::optional<KvCacheFormat> extra_format;
  KvLayout extra_kv_layout = KvLayout::kDefault;
  int64_t extra_page_block_size = 0;
  bool has_extra_topk_length = false;
  bool extra_topk_length_per_token = false;
  Device device{};

  friend bool operator==(const SparseDecodeProblem&, const SparseDecodeProblem&) = default;
};

// Derives the problem of a call (validating the arguments first).
Status describe_sparse_decode(const SparseDecodeArgs& args, SparseDecodeProblem* problem);

struct DecodePlan {
  SparseDecodeProblem problem;  // sparse_decode refuses arguments of another shape
  Backend backend = Backend::kCpu;
  std::string kernel;          // the kernel variant that will run
  int num_sm_parts = 0;        // work units the schedule splits the KV work into
  size_t workspace_bytes = 0;  // to allocate on problem.device (may be 0)
  std::string reason;          // why this kernel and this split count, for logs and `list`

  // The launch the CUDA back end chose (the CPU back ends leave these empty, 0 and false):
  std::string kernel_config;  // its kernel-table row, "portable_sparse_decode_v4fp8_d512_h16_k32"
  std::string kernel_family;  // "portable_sparse_decode"
  int rows_per_cta = 0;       // head rows per CTA: 16, 32 or 64
  int keys_per_block = 0;     // KV slots per block: 32 or 64
  int head_groups = 0;        // CTAs of a query's heads: ceil(h_q / rows_per_cta)
  bool warp_specialized = false;    // producer warps gather and dequantise
  bool paired_head_groups = false;  // 2 head groups as 2-CTA clusters sharing each block
  int64_t min_units_per_part = 0;   // the schedule's floor per part; 0 = the plain cost line
  // The request's s_q tokens as one 64-row tile over the union of their index lists: a row that
  // several draft tokens attend is gathered and dequantised once (docs/kernels/index_union.md).
  bool index_union = false;

  // Set by plan_sparse_decode over every field above but `reason`; sparse_decode refuses a plan
  // whose fields no longer match it (edited after planning, or not made by plan_sparse_decode).
  uint64_t fingerprint = 0;
};

Status plan_sparse_decode(const SparseDecodeProblem& problem, DecodePlan* plan,
                          const RunOptions& options = {});

enum class DecodeSchedule {
  kBuild,  // compute the schedule into the workspace (first layer of a step)
  kReuse,  // the workspace already holds the schedule for these topk lengths
};

// The workspace: plan.workspace_bytes bytes on problem.device (none where that is 0), aligned to
// kDecodeWorkspaceAlignment bytes (its regions are read with 16-B vector loads and copies;
// cudaMalloc and torch allocations are 256-B aligned), written by kBuild and read by kReuse.
inline constexpr size_t kDecodeWorkspaceAlignment = 16;

Status sparse_decode(const SparseDecodeArgs& args, const DecodePlan& plan, void* workspace,
                     size_t workspace_bytes, DecodeSchedule schedule = DecodeSchedule::kBuild,
                     const RunOptions& options = {});

}  // namespace sparse_mla
