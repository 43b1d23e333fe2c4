// sparse_prefill, plan_decode and sparse_decode as torch operators: tensors -> views, the
// public API call on the tensors' device and torch's current stream, Status -> exception.
//
// Each operation comes in two forms: the *_alloc operators validate the arguments, then allocate
// the outputs and run (what the Python API calls when no output is passed: validation comes
// before any allocation, so a bad size is reported as such, not as an allocator failure), and
// the plain operators write caller-given outputs, which must not overlap themselves or alias any
// input (checked here, before the library reads or writes anything).
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <cmath>
#include <limits>
#include <mutex>
#include <span>

#include "core/validate.h"
#include "ops.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/sparse_prefill.h"
#include "torch_adapter.h"

namespace sparse_mla::python {
namespace {

// int64 -> int without wrapping: values outside int become INT_MIN/INT_MAX, which validation
// rejects with the caller's value in range terms.
int saturate_int(int64_t v) {
  if (v < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  if (v > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  return static_cast<int>(v);
}

// d_v as the library's int; a value outside int is refused here with the caller's value.
int to_d_v(const char* op, int64_t d_v) {
  if (d_v != saturate_int(d_v)) {
    fail_value(std::string(op) + ": d_v = " + std::to_string(d_v) +
               " is not supported; d_v must be 512");
  }
  return static_cast<int>(d_v);
}

// Outputs' views before they exist: the right shapes and a placeholder address that validation
// checks for alignment and nothing reads or writes.
void* placeholder_address() {
  alignas(16) static const unsigned char placeholder[16] = {};
  return const_cast<unsigned char*>(placeholder);
}

// Cache copies made for packed v4_fp8 caches (to_cache_view); alive for the call.
struct StagedCaches {
  at::Tensor main, extra;
};

// The format and layout arguments of a decode call (absent: inferred / the format's own).
struct CacheNames {
  std::optional<std::string_view> kv_format, kv_layout, extra_kv_format, extra_kv_layout;
};

// The extra cache's view: its own format (extra_kv_format, else inferred from its bytes per
// token) and layout (extra_kv_layout, else kv_layout where that format has it: the caches of one
// model share a layout; else the format's own).
std::optional<KvCacheView> extra_cache_view(const char* op, const std::optional<at::Tensor>& t,
                                            const CacheNames& names, at::Tensor* staged) {
  if (!t.has_value()) return std::nullopt;
  constexpr CacheArgNames kExtraArgs{"extra_kv_format", "extra_kv_layout"};
  std::optional<std::string_view> layout = names.extra_kv_layout;
  if (!layout && names.kv_layout) {
    const std::optional<KvLayout> main_layout = parse_layout_arg(op, "kv_layout", names.kv_layout);
    const KvCacheFormat format =
        cache_format(op, "extra_kv_cache", *t, names.extra_kv_format, kExtraArgs);
    if (kv_cache_layout_supported(format, *main_layout)) layout = names.kv_layout;
  }
  return to_cache_view(op, "extra_kv_cache", *t, names.extra_kv_format, layout, staged, kExtraArgs);
}

// The decode arguments without outputs (out/lse are set by the caller).
SparseDecodeArgs decode_inputs(
    const char* op, const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
    const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& extra_kv_cache, const std::optional<at::Tensor>& extra_indices,
    const std::optional<at::Tensor>& extra_topk_length, const CacheNames& names,
    std::optional<double> softmax_scale, int64_t d_v, StagedCaches* staged) {
  SparseDecodeArgs args;
  args.q = to_view(op, "q", q);
  args.kv_cache =
      to_cache_view(op, "kv_cache", kv_cache, names.kv_format, names.kv_layout, &staged->main);
  args.indices = to_view(op, "indices", indices);
  args.topk_length = to_view(op, "topk_length", topk_length);
  args.attn_sink = to_view(op, "attn_sink", attn_sink);
  // Validation checks that the extra cache's format goes with the main cache's.
  args.extra_kv_cache = extra_cache_view(op, extra_kv_cache, names, &staged->extra);
  args.extra_indices = to_view(op, "extra_indices", extra_indices);
  args.extra_topk_length = to_view(op, "extra_topk_length", extra_topk_length);
  if (softmax_scale.has_value()) args.softmax_scale = static_cast<float>(*softmax_scale);
  args.d_v = to_d_v(op, d_v);
  return args;
}

// Sets out/lse to placeholder views of the shapes the call needs.
void placeholder_decode_outputs(const at::Tensor& q, SparseDecodeArgs* args) {
  const int64_t b = q.dim() == 4 ? q.size(0) : 0, s_q = q.dim() == 4 ? q.size(1) : 0;
  const int64_t h_q = q.dim() == 4 ? q.size(2) : 0;
  void* address = placeholder_address();
  args->out =
      TensorView::contiguous(address, DType::kBFloat16, {b, s_q, h_q, args->d_v}, args->q.device);
  args->lse = TensorView::contiguous(address, DType::kFloat32, {b, s_q, h_q}, args->q.device);
}

// Plans by problem, remembered per process: a plan is a pure function of the problem (shapes,
// device) and the back end, and the library reads its knobs once per process, so every call of
// a decode step after the first skips kernel selection and the device queries planning makes.
class PlanCache {
 public:
  DecodePlan get(const SparseDecodeProblem& problem, const RunOptions& options) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (const Entry& e : entries_) {
        if (e.used && e.backend == options.backend && e.plan.problem == problem) return e.plan;
      }
    }
    DecodePlan plan;
    throw_if_error(plan_sparse_decode(problem, &plan, options));
    const std::lock_guard<std::mutex> lock(mutex_);
    Entry& slot = entries_[next_];
    next_ = (next_ + 1) % entries_.size();
    slot = Entry{true, options.backend, plan};
    return plan;
  }

 private:
  struct Entry {
    bool used = false;
    Backend backend = Backend::kCpu;
    DecodePlan plan;
  };
  std::mutex mutex_;
  std::array<Entry, 64> entries_{};
  size_t next_ = 0;
};

DecodePlan plan_for(const SparseDecodeArgs& args, const RunOptions& options) {
  static PlanCache cache;
  SparseDecodeProblem problem;
  throw_if_error(describe_sparse_decode(args, &problem));
  return cache.get(problem, options);
}

// The caller's workspace (checked) or, when absent, one allocated for this call.
at::Tensor decode_workspace(const char* op, const at::Tensor& q,
                            const std::optional<at::Tensor>& workspace, bool reuse_schedule,
                            const DecodePlan& plan) {
  if (workspace.has_value()) {
    const at::Tensor& buffer = *workspace;
    const std::string prefix = std::string(op) + ": workspace";
    TORCH_CHECK_VALUE(buffer.device() == q.device(), prefix, " is on ", buffer.device().str(),
                      " but q is on ", q.device().str());
    TORCH_CHECK_VALUE(buffer.scalar_type() == at::kByte && buffer.is_contiguous(), prefix,
                      " must be a contiguous uint8 tensor, got ", buffer.scalar_type());
    return buffer;
  }
  TORCH_CHECK_VALUE(!reuse_schedule || plan.workspace_bytes == 0, op,
                    ": reuse_schedule is set but no workspace holding a schedule was given");
  if (plan.workspace_bytes == 0) return {};
  return at::empty({static_cast<int64_t>(plan.workspace_bytes)}, q.options().dtype(at::kByte));
}

// An argument by name (undefined when absent).
using NamedTensor = std::pair<const char*, const at::Tensor*>;

// `out` (an output or the workspace) must not share memory with any input.
void check_disjoint_from_inputs(const char* op, const char* out_name, const at::Tensor& out,
                                std::span<const NamedTensor> inputs) {
  for (const auto& [name, t] : inputs) check_disjoint(op, out_name, out, name, *t);
}

const at::Tensor& or_undefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t.has_value() ? *t : undefined;
}

// A decode call's tensors by argument name for the aliasing checks: the eight inputs (absent
// optional ones undefined), then out and lse where the caller passed them.
struct DecodeTensors {
  std::array<NamedTensor, 10> named;
  size_t count = 8;
  std::span<const NamedTensor> inputs() const { return std::span(named).first(8); }
  std::span<const NamedTensor> all() const { return std::span(named).first(count); }
};

DecodeTensors decode_tensors(const at::Tensor& q, const at::Tensor& kv_cache,
                             const at::Tensor& indices,
                             const std::optional<at::Tensor>& topk_length,
                             const std::optional<at::Tensor>& attn_sink,
                             const std::optional<at::Tensor>& extra_kv_cache,
                             const std::optional<at::Tensor>& extra_indices,
                             const std::optional<at::Tensor>& extra_topk_length,
                             const at::Tensor* out = nullptr, const at::Tensor* lse = nullptr) {
  DecodeTensors t;
  t.named = {{{"q", &q},
              {"kv_cache", &kv_cache},
              {"indices", &indices},
              {"topk_length", &or_undefined(topk_length)},
              {"attn_sink", &or_undefined(attn_sink)},
              {"extra_kv_cache", &or_undefined(extra_kv_cache)},
              {"extra_indices", &or_undefined(extra_indices)},
              {"extra_topk_length", &or_undefined(extra_topk_length)},
              {"out", out},
              {"lse", lse}}};
  t.count = out != nullptr ? 10 : 8;
  return t;
}

void run_decode(const char* op, const at::Tensor& q, SparseDecodeArgs& args,
                const std::optional<at::Tensor>& workspace, bool reuse_schedule,
                const RunOptions& options, const DecodePlan& plan,
                std::span<const NamedTensor> all_tensors) {
  const at::Tensor buffer = decode_workspace(op, q, workspace, reuse_schedule, plan);
  if (workspace.has_value()) check_disjoint_from_inputs(op, "workspace", buffer, all_tensors);
  void* workspace_ptr = buffer.defined() ? buffer.data_ptr() : nullptr;
  const size_t workspace_bytes = buffer.defined() ? static_cast<size_t>(buffer.nbytes()) : 0;
  throw_if_error(sparse_mla::sparse_decode(
      args, plan, workspace_ptr, workspace_bytes,
      reuse_schedule ? DecodeSchedule::kReuse : DecodeSchedule::kBuild, options));
}

SparsePrefillArgs prefill_inputs(const char* op, const at::Tensor& q, const at::Tensor& kv,
                                 const at::Tensor& indices, double sm_scale, int64_t d_v,
                                 const std::optional<at::Tensor>& attn_sink,
                                 const std::optional<at::Tensor>& topk_length) {
  SparsePrefillArgs args;
  args.q = to_view(op, "q", q);
  args.kv = to_view(op, "kv", kv);
  args.indices = to_view(op, "indices", indices);
  args.sm_scale = static_cast<float>(sm_scale);
  args.d_v = to_d_v(op, d_v);
  args.attn_sink = to_view(op, "attn_sink", attn_sink);
  args.topk_length = to_view(op, "topk_length", topk_length);
  return args;
}

}  // namespace

void sparse_prefill(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& indices,
                    double sm_scale, int64_t d_v, const std::optional<at::Tensor>& attn_sink,
                    const std::optional<at::Tensor>& topk_length, at::Tensor& out,
                    at::Tensor& max_logits, at::Tensor& lse) {
  constexpr const char* kOp = "sparse_prefill";
  SparsePrefillArgs args =
      prefill_inputs(kOp, q, kv, indices, sm_scale, d_v, attn_sink, topk_length);
  args.out = to_view(kOp, "out", out);
  args.max_logits = to_view(kOp, "max_logits", max_logits);
  args.lse = to_view(kOp, "lse", lse);
  const at::Tensor& sink = or_undefined(attn_sink);
  const at::Tensor& lengths = or_undefined(topk_length);
  const std::array<NamedTensor, 5> inputs = {{{"q", &q},
                                              {"kv", &kv},
                                              {"indices", &indices},
                                              {"attn_sink", &sink},
                                              {"topk_length", &lengths}}};
  for (auto [name, t] :
       {std::pair{"out", &out}, std::pair{"max_logits", &max_logits}, std::pair{"lse", &lse}}) {
    check_no_internal_overlap(kOp, name, *t);
    check_disjoint_from_inputs(kOp, name, *t, inputs);
  }
  check_disjoint(kOp, "out", out, "max_logits", max_logits);
  check_disjoint(kOp, "out", out, "lse", lse);
  check_disjoint(kOp, "max_logits", max_logits, "lse", lse);
  const c10::DeviceGuard guard(q.device());
  throw_if_error(sparse_mla::sparse_prefill(args, run_options_for(q.device())));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sparse_prefill_alloc(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& indices, double sm_scale,
    int64_t d_v, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& topk_length) {
  constexpr const char* kOp = "sparse_prefill";
  SparsePrefillArgs args =
      prefill_inputs(kOp, q, kv, indices, sm_scale, d_v, attn_sink, topk_length);
  const int64_t s_q = q.dim() == 3 ? q.size(0) : 0, h_q = q.dim() == 3 ? q.size(1) : 0;
  void* address = placeholder_address();
  args.out = TensorView::contiguous(address, DType::kBFloat16, {s_q, h_q, args.d_v}, args.q.device);
  args.max_logits = TensorView::contiguous(address, DType::kFloat32, {s_q, h_q}, args.q.device);
  args.lse = args.max_logits;
  detail::PrefillParams checked;
  throw_if_error(detail::validate_prefill(args, &checked));

  at::Tensor out = at::empty({s_q, h_q, args.d_v}, q.options());
  at::Tensor max_logits = at::empty({s_q, h_q}, q.options().dtype(at::kFloat));
  at::Tensor lse = at::empty({s_q, h_q}, q.options().dtype(at::kFloat));
  args.out = to_view(kOp, "out", out);
  args.max_logits = to_view(kOp, "max_logits", max_logits);
  args.lse = to_view(kOp, "lse", lse);
  const c10::DeviceGuard guard(q.device());
  throw_if_error(sparse_mla::sparse_prefill(args, run_options_for(q.device())));
  return {std::move(out), std::move(max_logits), std::move(lse)};
}

std::tuple<int64_t, int64_t, std::string, std::string, std::string> plan_decode(
    const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
    const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& extra_kv_cache, const std::optional<at::Tensor>& extra_indices,
    const std::optional<at::Tensor>& extra_topk_length, std::optional<std::string_view> kv_format,
    int64_t d_v, std::optional<std::string_view> kv_layout,
    std::optional<std::string_view> extra_kv_format,
    std::optional<std::string_view> extra_kv_layout) {
  constexpr const char* kOp = "plan_decode";
  StagedCaches staged;
  SparseDecodeArgs args = decode_inputs(kOp, q, kv_cache, indices, topk_length, attn_sink,
                                        extra_kv_cache, extra_indices, extra_topk_length,
                                        {kv_format, kv_layout, extra_kv_format, extra_kv_layout},
                                        std::nullopt, d_v, &staged);
  // A plan depends on shapes only.
  placeholder_decode_outputs(q, &args);
  const c10::DeviceGuard guard(q.device());
  const DecodePlan plan = plan_for(args, run_options_for(q.device()));
  return {static_cast<int64_t>(plan.workspace_bytes), plan.num_sm_parts, backend_name(plan.backend),
          plan.kernel, plan.reason};
}

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
                   std::optional<std::string_view> extra_kv_layout) {
  constexpr const char* kOp = "sparse_decode";
  StagedCaches staged;
  SparseDecodeArgs args = decode_inputs(kOp, q, kv_cache, indices, topk_length, attn_sink,
                                        extra_kv_cache, extra_indices, extra_topk_length,
                                        {kv_format, kv_layout, extra_kv_format, extra_kv_layout},
                                        softmax_scale, d_v, &staged);
  args.out = to_view(kOp, "out", out);
  args.lse = to_view(kOp, "lse", lse);
  // The inputs, then the outputs: the workspace must be disjoint from all of them.
  const DecodeTensors tensors =
      decode_tensors(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
                     extra_topk_length, &out, &lse);
  for (auto [name, t] : {std::pair{"out", &out}, std::pair{"lse", &lse}}) {
    check_no_internal_overlap(kOp, name, *t);
    check_disjoint_from_inputs(kOp, name, *t, tensors.inputs());
  }
  check_disjoint(kOp, "out", out, "lse", lse);

  const c10::DeviceGuard guard(q.device());
  const RunOptions options = run_options_for(q.device());
  const DecodePlan plan = plan_for(args, options);
  run_decode(kOp, q, args, workspace, reuse_schedule, options, plan, tensors.all());
}

std::tuple<at::Tensor, at::Tensor> sparse_decode_alloc(
    const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& indices,
    const std::optional<at::Tensor>& topk_length, const std::optional<at::Tensor>& attn_sink,
    const std::optional<at::Tensor>& extra_kv_cache, const std::optional<at::Tensor>& extra_indices,
    const std::optional<at::Tensor>& extra_topk_length, std::optional<std::string_view> kv_format,
    std::optional<double> softmax_scale, int64_t d_v, const std::optional<at::Tensor>& workspace,
    bool reuse_schedule, std::optional<std::string_view> kv_layout,
    std::optional<std::string_view> extra_kv_format,
    std::optional<std::string_view> extra_kv_layout) {
  constexpr const char* kOp = "sparse_decode";
  StagedCaches staged;
  SparseDecodeArgs args = decode_inputs(kOp, q, kv_cache, indices, topk_length, attn_sink,
                                        extra_kv_cache, extra_indices, extra_topk_length,
                                        {kv_format, kv_layout, extra_kv_format, extra_kv_layout},
                                        softmax_scale, d_v, &staged);
  placeholder_decode_outputs(q, &args);
  const c10::DeviceGuard guard(q.device());
  const RunOptions options = run_options_for(q.device());
  // Validates every argument (describe_sparse_decode) before anything is allocated.
  const DecodePlan plan = plan_for(args, options);
  const SparseDecodeProblem& p = plan.problem;
  at::Tensor out = at::empty({p.b, p.s_q, p.h_q, p.d_v}, q.options());
  at::Tensor lse = at::empty({p.b, p.s_q, p.h_q}, q.options().dtype(at::kFloat));
  args.out = to_view(kOp, "out", out);
  args.lse = to_view(kOp, "lse", lse);
  const DecodeTensors inputs = decode_tensors(q, kv_cache, indices, topk_length, attn_sink,
                                              extra_kv_cache, extra_indices, extra_topk_length);
  run_decode(kOp, q, args, workspace, reuse_schedule, options, plan, inputs.all());
  return {std::move(out), std::move(lse)};
}

}  // namespace sparse_mla::python
