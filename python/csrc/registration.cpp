// Registers the operators of namespace `sparse_mla` with torch: their schemas (mutated outputs
// marked `(a!)`, so torch.compile functionalizes them) and their CPU and CUDA kernels. The fake
// (meta) implementations live in python/sparse_mla/ops.py. The library is loaded with
// torch.ops.load_library; no Python module is defined here.
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(sparse_mla, m) {
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "sparse_prefill(Tensor q, Tensor kv, Tensor indices, float sm_scale, int d_v, "
      "Tensor? attn_sink, Tensor? topk_length, Tensor(a!) out, Tensor(b!) max_logits, "
      "Tensor(c!) lse) -> ()",
      tags);
  m.def(
      "sparse_prefill_alloc(Tensor q, Tensor kv, Tensor indices, float sm_scale, int d_v, "
      "Tensor? attn_sink, Tensor? topk_length) -> (Tensor out, Tensor max_logits, Tensor lse)",
      tags);
  m.def(
      "plan_decode(Tensor q, Tensor kv_cache, Tensor indices, Tensor? topk_length, "
      "Tensor? attn_sink, Tensor? extra_kv_cache, Tensor? extra_indices, "
      "Tensor? extra_topk_length, str? kv_format, int d_v, *, str? kv_layout=None, "
      "str? extra_kv_format=None, str? extra_kv_layout=None) -> (int, int, str, str, str)");
  m.def(
      "sparse_decode(Tensor q, Tensor kv_cache, Tensor indices, Tensor? topk_length, "
      "Tensor? attn_sink, Tensor? extra_kv_cache, Tensor? extra_indices, "
      "Tensor? extra_topk_length, str? kv_format, float? softmax_scale, int d_v, "
      "Tensor(d!)? workspace, bool reuse_schedule, Tensor(a!) out, Tensor(b!) lse, *, "
      "str? kv_layout=None, str? extra_kv_format=None, str? extra_kv_layout=None) -> ()",
      tags);
  m.def(
      "sparse_decode_alloc(Tensor q, Tensor kv_cache, Tensor indices, Tensor? topk_length, "
      "Tensor? attn_sink, Tensor? extra_kv_cache, Tensor? extra_indices, "
      "Tensor? extra_topk_length, str? kv_format, float? softmax_scale, int d_v, "
      "Tensor(d!)? workspace, bool reuse_schedule, *, str? kv_layout=None, "
      "str? extra_kv_format=None, str? extra_kv_layout=None) -> (Tensor out, Tensor lse)",
      tags);
  m.def(
      "quantize_kv_cache(Tensor kv, str kv_format, Tensor(a!) cache, *, str? kv_layout=None) -> ()",
      tags);
  m.def(
      "dequantize_kv_cache(Tensor cache, str? kv_format, Tensor(a!) out, *, "
      "str? kv_layout=None) -> ()",
      tags);
  m.def(
      "write_kv_cache(Tensor rows, Tensor slot_mapping, Tensor(a!) cache, str? kv_format=None, "
      "str? kv_layout=None) -> ()",
      tags);
}

namespace {

// The same kernels serve CPU and CUDA tensors: each picks its back end from the tensors' device.
void register_kernels(torch::Library& m) {
  m.impl("sparse_prefill", &sparse_mla::python::sparse_prefill);
  m.impl("plan_decode", &sparse_mla::python::plan_decode);
  m.impl("sparse_decode", &sparse_mla::python::sparse_decode);
  m.impl("sparse_prefill_alloc", &sparse_mla::python::sparse_prefill_alloc);
  m.impl("sparse_decode_alloc", &sparse_mla::python::sparse_decode_alloc);
  m.impl("quantize_kv_cache", &sparse_mla::python::quantize_kv_cache);
  m.impl("dequantize_kv_cache", &sparse_mla::python::dequantize_kv_cache);
  m.impl("write_kv_cache", &sparse_mla::python::write_kv_cache);
}

}  // namespace

TORCH_LIBRARY_IMPL(sparse_mla, CPU, m) { register_kernels(m); }

TORCH_LIBRARY_IMPL(sparse_mla, CUDA, m) { register_kernels(m); }

// No operator has a backward: an input that requires grad raises instead of giving outputs
// without gradients.
TORCH_LIBRARY_IMPL(sparse_mla, Autograd, m) {
  for (const char* name :
       {"sparse_prefill", "sparse_prefill_alloc", "plan_decode", "sparse_decode",
        "sparse_decode_alloc", "quantize_kv_cache", "dequantize_kv_cache", "write_kv_cache"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&sparse_mla::python::no_backward>());
  }
}
