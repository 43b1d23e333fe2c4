// A whole decode step in a CUDA graph: plan once on the host, capture two layers on one stream
// (layer 0 with DecodeSchedule::kBuild: planner + split kernel + combine; layer 1 with kReuse),
// then replay the graph with new q / cache / indices / topk_length / sink values copied into the
// same device buffers. Every replay must match the CPU reference for its own inputs, which shows
// the planner ran on the device from the new lengths with no host synchronisation, and be
// bit-identical to the same two calls run eagerly on those inputs (same plan and workspace): the
// decode path has no order that depends on timing (the index union's shared-memory atomics only
// decide where a key sits in its hash table, not what the union holds or its order), so a graph
// changes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_test_support.h"

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "sparse_mla/sparse_mla.h"
#include "verify/check.h"
#include "verify/recipe.h"

namespace sparse_mla {
namespace {

using test_support::kGpu;

#define SMLA_ASSERT_CUDA(call) \
  ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// Copies the host storage behind `host_view` into the device storage behind `device_view`
// (upload() keeps each view's offset into its vector, so the bases line up).
template <typename T>
Status copy_into(const std::vector<T>& host, const TensorView& host_view,
                 const TensorView& device_view) {
  const auto offset =
      static_cast<const char*>(host_view.data) - reinterpret_cast<const char*>(host.data());
  return copy_bytes(static_cast<char*>(device_view.data) - offset, kGpu, host.data(), Device::cpu(),
                    host.size() * sizeof(T));
}

// Overwrites the inputs of `device` (uploaded from a case of the same recipe shape) with `c`'s.
Status copy_inputs(const verify::DecodeCase& c, const SparseDecodeArgs& device) {
  SMLA_RETURN_IF_ERROR(copy_into(c.q, c.q_view, device.q));
  SMLA_RETURN_IF_ERROR(copy_into(c.indices, c.indices_view, device.indices));
  SMLA_RETURN_IF_ERROR(copy_bytes(const_cast<void*>(device.kv_cache.data), kGpu, c.cache.data(),
                                  Device::cpu(), c.cache.size()));
  if (c.topk_length_view) {
    SMLA_RETURN_IF_ERROR(copy_into(c.topk_length, *c.topk_length_view, *device.topk_length));
  }
  if (c.attn_sink_view) {
    SMLA_RETURN_IF_ERROR(copy_into(c.attn_sink, *c.attn_sink_view, *device.attn_sink));
  }
  if (c.extra_cache_view) {
    SMLA_RETURN_IF_ERROR(copy_bytes(const_cast<void*>(device.extra_kv_cache->data), kGpu,
                                    c.extra_cache.data(), Device::cpu(), c.extra_cache.size()));
    SMLA_RETURN_IF_ERROR(copy_into(c.extra_indices, *c.extra_indices_view, *device.extra_indices));
    if (c.extra_topk_length_view) {
      SMLA_RETURN_IF_ERROR(
          copy_into(c.extra_topk_length, *c.extra_topk_length_view, *device.extra_topk_length));
    }
  }
  return {};
}

// Device outputs [b, s_q, h_q, 512] bf16 and [b, s_q, h_q] fp32, contiguous.
struct DeviceOutputs {
  Buffer out, lse;
  TensorView out_view, lse_view;
};

Status allocate_device_outputs(const SparseDecodeProblem& p, DeviceOutputs* o) {
  SMLA_RETURN_IF_ERROR(Buffer::allocate(kGpu, p.b * p.s_q * p.h_q * 512 * 2, &o->out));
  SMLA_RETURN_IF_ERROR(Buffer::allocate(kGpu, p.b * p.s_q * p.h_q * 4, &o->lse));
  o->out_view =
      TensorView::contiguous(o->out.data(), DType::kBFloat16, {p.b, p.s_q, p.h_q, 512}, kGpu);
  o->lse_view = TensorView::contiguous(o->lse.data(), DType::kFloat32, {p.b, p.s_q, p.h_q}, kGpu);
  // NaN everywhere, so that a replay that skips an output cannot pass on stale values.
  SMLA_RETURN_IF_ERROR(fill_bytes(o->out.data(), kGpu, 0xFF, o->out.bytes()));
  return fill_bytes(o->lse.data(), kGpu, 0xFF, o->lse.bytes());
}

// The raw bytes of out and lse, NaN patterns included, for bit-exact comparisons.
Status download_bytes(const DeviceOutputs& d, std::vector<uint8_t>* out,
                      std::vector<uint8_t>* lse) {
  out->resize(d.out.bytes());
  lse->resize(d.lse.bytes());
  SMLA_RETURN_IF_ERROR(copy_bytes(out->data(), Device::cpu(), d.out.data(), kGpu, out->size()));
  return copy_bytes(lse->data(), Device::cpu(), d.lse.data(), kGpu, lse->size());
}

// Index of the first byte where `a` and `b` differ, or -1 when they are equal.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

Status download(const DeviceOutputs& d, const SparseDecodeProblem& p, verify::DecodeOutputs* o) {
  verify::allocate_outputs(p, o);
  SMLA_RETURN_IF_ERROR(copy_bytes(o->out.data(), Device::cpu(), d.out.data(), kGpu, d.out.bytes()));
  return copy_bytes(o->lse.data(), Device::cpu(), d.lse.data(), kGpu, d.lse.bytes());
}

void run_graph_case(const verify::DecodeRecipe& recipe, const std::string& what) {
  SCOPED_TRACE(what);
  verify::DecodeCase first;
  SMLA_ASSERT_OK(verify::make_decode_case(recipe, &first));
  verify::DeviceDecodeInputs inputs;
  SMLA_ASSERT_OK(verify::upload(first, kGpu, &inputs));
  // The graph's two layers write layer0 / layer1; the eager calls write eager0 / eager1.
  DeviceOutputs layer0, layer1, eager0, eager1;
  for (DeviceOutputs* o : {&layer0, &layer1, &eager0, &eager1}) {
    SMLA_ASSERT_OK(allocate_device_outputs(first.problem, o));
  }
  const auto with_outputs = [&](const DeviceOutputs& o) {
    SparseDecodeArgs a = inputs.args_template;
    a.out = o.out_view;
    a.lse = o.lse_view;
    return a;
  };
  const SparseDecodeArgs args0 = with_outputs(layer0), args1 = with_outputs(layer1);
  const SparseDecodeArgs eager_args0 = with_outputs(eager0), eager_args1 = with_outputs(eager1);

  cudaStream_t stream;
  SMLA_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  RunOptions options;
  options.backend = Backend::kCuda;
  options.stream = stream;
  SparseDecodeProblem problem;
  SMLA_ASSERT_OK(describe_sparse_decode(args0, &problem));
  DecodePlan plan;
  SMLA_ASSERT_OK(plan_sparse_decode(problem, &plan, options));
  Buffer workspace;
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, plan.workspace_bytes, &workspace));

  cudaGraph_t graph;
  SMLA_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  Status layer0_status = sparse_decode(args0, plan, workspace.data(), plan.workspace_bytes,
                                       DecodeSchedule::kBuild, options);
  Status layer1_status = sparse_decode(args1, plan, workspace.data(), plan.workspace_bytes,
                                       DecodeSchedule::kReuse, options);
  SMLA_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  SMLA_ASSERT_OK(layer0_status);
  SMLA_ASSERT_OK(layer1_status);
  cudaGraphExec_t exec;
  SMLA_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  for (uint64_t replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + " of kernel " + plan.kernel);
    verify::DecodeRecipe next = recipe;
    next.seed = recipe.seed + replay;
    verify::DecodeCase c;
    SMLA_ASSERT_OK(verify::make_decode_case(next, &c));
    ASSERT_EQ(c.cache.size(), first.cache.size());
    ASSERT_EQ(c.q.size(), first.q.size());
    SMLA_ASSERT_OK(copy_inputs(c, inputs.args_template));
    for (DeviceOutputs* o : {&layer0, &layer1, &eager0, &eager1}) {  // NaN again: no stale pass
      SMLA_ASSERT_OK(fill_bytes(o->out.data(), kGpu, 0xFF, o->out.bytes()));
      SMLA_ASSERT_OK(fill_bytes(o->lse.data(), kGpu, 0xFF, o->lse.bytes()));
    }
    SMLA_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    SMLA_ASSERT_CUDA(cudaStreamSynchronize(stream));

    verify::DecodeOutputs expected, got0, got1;
    SMLA_ASSERT_OK(verify::run_reference(c, &expected));
    SMLA_ASSERT_OK(download(layer0, problem, &got0));
    SMLA_ASSERT_OK(download(layer1, problem, &got1));
    verify::CheckReport r0 = verify::check_decode(got0, expected);
    EXPECT_TRUE(r0.ok) << "layer 0 (kBuild):\n" << r0.message;
    verify::CheckReport r1 = verify::check_decode(got1, expected);
    EXPECT_TRUE(r1.ok) << "layer 1 (kReuse):\n" << r1.message;

    // The same two calls, eagerly, on the inputs still in the buffers.
    SMLA_ASSERT_OK(sparse_decode(eager_args0, plan, workspace.data(), plan.workspace_bytes,
                                 DecodeSchedule::kBuild, options));
    SMLA_ASSERT_OK(sparse_decode(eager_args1, plan, workspace.data(), plan.workspace_bytes,
                                 DecodeSchedule::kReuse, options));
    SMLA_ASSERT_CUDA(cudaStreamSynchronize(stream));
    const std::pair<const DeviceOutputs*, const DeviceOutputs*> layers[] = {{&layer0, &eager0},
                                                                            {&layer1, &eager1}};
    for (int layer = 0; layer < 2; ++layer) {
      std::vector<uint8_t> graph_out, graph_lse, eager_out, eager_lse;
      SMLA_ASSERT_OK(download_bytes(*layers[layer].first, &graph_out, &graph_lse));
      SMLA_ASSERT_OK(download_bytes(*layers[layer].second, &eager_out, &eager_lse));
      EXPECT_EQ(first_difference(graph_out, eager_out), -1)
          << "layer " << layer << ": the graph's out differs from the eager call's at this byte";
      EXPECT_EQ(first_difference(graph_lse, eager_lse), -1)
          << "layer " << layer << ": the graph's lse differs from the eager call's at this byte";
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeGraphGpu, ReplaysWithNewInputsMatchReference) {
  SMLA_SKIP_WITHOUT_GPU();
  // V3.2: few queries with long lists, so the schedule splits queries and the combine runs;
  // lengths per query token (MTP), which FlashMLA lacks.
  verify::DecodeRecipe v32;
  v32.b = 3;
  v32.s_q = 2;
  v32.h_q = 64;
  v32.topk = 700;
  v32.format = KvCacheFormat::kV32Fp8;
  v32.page_block_size = 61;
  v32.topk_length_per_token = true;
  v32.seed = 101;
  run_graph_case(v32, "v32_fp8 b=3 s_q=2 h_q=64 topk=700 page=61");
  if (HasFatalFailure()) return;

  // V4: main + extra cache, per-request lengths, 16 heads.
  verify::DecodeRecipe v4;
  v4.b = 5;
  v4.s_q = 2;
  v4.h_q = 16;
  v4.topk = 128;
  v4.format = KvCacheFormat::kV4Fp8;
  v4.page_block_size = 64;
  v4.extra_cache = true;
  v4.extra_topk = 512;
  v4.extra_page_block_size = 53;
  v4.seed = 202;
  run_graph_case(v4, "v4_fp8 b=5 s_q=2 h_q=16 topk=128+512 extra");
  if (HasFatalFailure()) return;

  // bf16 at d_qk 512 and two head groups (gpu_decode_sm90a forces the Hopper decode on this and
  // the V3.2 case): main + extra cache, per-token lengths, an odd page.
  verify::DecodeRecipe bf16;
  bf16.b = 2;
  bf16.s_q = 2;
  bf16.h_q = 128;
  bf16.topk = 256;
  bf16.format = KvCacheFormat::kBf16;
  bf16.d_qk = 512;
  bf16.page_block_size = 37;
  bf16.topk_length_per_token = true;
  bf16.extra_cache = true;
  bf16.extra_topk = 128;
  bf16.extra_page_block_size = 64;
  bf16.seed = 303;
  run_graph_case(bf16, "bf16 d_qk=512 b=2 s_q=2 h_q=128 topk=256+128 extra page=37");
}

}  // namespace
}  // namespace sparse_mla

#else  // built without CUDA: nothing to capture

TEST(DecodeGraphGpu, ReplaysWithNewInputsMatchReference) { SMLA_SKIP_WITHOUT_GPU(); }

#endif
