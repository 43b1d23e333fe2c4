// The torch operators of namespace `sparse_mla` (schemas in registration.cpp). Each one adapts
// its tensors to the public C++ API and runs on the back end of the tensors' device (CPU tensors:
// the CPU back end; CUDA tensors: the CUDA back end on torch's current stream). Outputs are
// written in place into caller-provided tensors; the Python layer allocates them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

namespace sparse_mla::python {

// SPEC §2. q [s_q, h_q, d_qk] bf16, kv [s_kv, 1, d_qk] bf16, indices [s_q, 1, topk] int32,
// attn_sink [h_q] fp32, topk_length [s_q] int32; writes out [s_q, h_q, d_v] bf16,
// max_logits [s_q, h_q] fp32, lse [s_q, h_q] fp32.
void sparse_prefill(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& indices,
                    double sm_scale, int64_t d_v, const std::optional<at::Tensor>& attn_sink,
                    const std::optional<at::Tensor>& topk_length, at::Tensor& out,
                    at::Tensor& max_logits, at::Tensor& lse);

// sparse_prefill with outputs it allocates after validating every argument:
// (out, max_logits, lse).
std::tuple<at::Tensor, at::Tensor, at::Tensor> sparse_prefill_alloc(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& indices, double sm_scale,
    int64_t d_v, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& topk_length);

// The decode plan for these arguments' shapes (host only; reads no tensor data):
// (workspace_bytes, num_sm_parts, backend, kernel, reason).
// kv_layout: the main cache's layout (absent: its format's own); extra_kv_format: the extra
// cache's format (absent: inferred from its bytes per token); extra_kv_layout: its layout (absent:
// kv_layout where the extra cache's format has it, else the format's own).
std::tuple<int64_t, int64_t, std::string, std::string, std::string> plan_decode(
    const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
    const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& extra_kv_cache, const std::optional<at::Tensor>& extra_indices,
    const std::optional<at::Tensor>& extra_topk_length, std::optional<std::string_view> kv_format,
    int64_t d_v, std::optional<std::string_view> kv_layout,
    std::optional<std::string_view> extra_kv_format,
    std::optional<std::string_view> extra_kv_layout);

// SPEC §3. q [b, s_q, h_q, d_qk] bf16, caches [num_blocks, page_block_size, 1, bytes_per_token],
// indices [b, s_q, topk] int32, topk_length [b] or [b, s_q] int32, attn_sink [h_q] fp32;
// writes out [b, s_q, h_q, d_v] bf16 and lse [b, s_q, h_q] fp32. Outputs (and the workspace)
// must not overlap themselves or any input. `workspace` (uint8, on the
// device, at least the plan's workspace_bytes) holds the split schedule; when absent one is
// allocated for this call. reuse_schedule: the workspace already holds the schedule of an
// earlier call with the same shapes and topk lengths.
void sparse_decode(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
                   const std::optional<at::Tensor>& topk_length,
                   const std::optional<at::Tensor>& attn_sink,
                   const std::optional<at::Tensor>& extra_kv_cache,
                   const std::optional<at::Tensor>& extra_indices,
                   const std::optional<at::Tensor>& extra_topk_length,
                   std::optional<std::string_view> kv_format, std::optional<double> softmax_scale,
                   int64_t d_v, const std::optional<at::Tensor>& workspace, bool reuse_schedule,
                   at::Tensor& out, at::Tensor& lse, std::optional<std::string_view> kv_layout,
                   std::optional<std::string_view> extra_kv_format,
                   std::optional<std::string_view> extra_kv_layout);

// sparse_decode with outputs it allocates after validating every argument: (out, lse).
std::tuple<at::Tensor, at::Tensor> sparse_decode_alloc(
    const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
    const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& extra_kv_cache, const std::optional<at::Tensor>& extra_indices,
    const std::optional<at::Tensor>& extra_topk_length, std::optional<std::string_view> kv_format,
    std::optional<double> softmax_scale, int64_t d_v, const std::optional<at::Tensor>& workspace,
    bool reuse_schedule, std::optional<std::string_view> kv_layout,
    std::optional<std::string_view> extra_kv_format,
    std::optional<std::string_view> extra_kv_layout);

// Autograd kernel of every operator: none of them has a backward, so an input that requires
// grad (with grad mode on) raises NotImplementedError naming the operator and the argument;
// otherwise the call goes on below autograd.
void no_backward(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

// SPEC §4, on the tensors' device (CUDA: device kernels on torch's current stream).
// kv [num_blocks, page_block_size, 1, d_qk] bf16 -> cache bytes
// [num_blocks, page_block_size, 1, bytes_per_token]; every byte of every block stride is written.
// kv_layout: "page_split" / "token_interleaved" (absent: the format's own).
void quantize_kv_cache(const at::Tensor& kv, std::string_view kv_format, at::Tensor& cache,
                       std::optional<std::string_view> kv_layout);

// cache -> out [num_blocks, page_block_size, 1, d_qk] bf16 or fp32 (fp32 is exact).
void dequantize_kv_cache(const at::Tensor& cache, std::optional<std::string_view> kv_format,
                         at::Tensor& out, std::optional<std::string_view> kv_layout);

// The engine's per-step cache writer: rows [n, d_qk] bf16 quantized into `cache` at the physical
// slots slot_mapping [n] int32 (slots < 0 skipped); other tokens untouched. On CUDA one kernel on
// torch's current stream, no allocation and no synchronisation (CUDA-graph safe) for caches with
// their format's block stride.
void write_kv_cache(const at::Tensor& rows, const at::Tensor& slot_mapping, at::Tensor& cache,
                    std::optional<std::string_view> kv_format,
                    std::optional<std::string_view> kv_layout);

}  // namespace sparse_mla::python
