// Prepares recipe cases for one back end and runs them through the public API (case_runner.h).
#include "case_runner.h"

namespace sparse_mla::cli {

namespace {

// A contiguous output tensor on `device`, filled with 0xFF bytes (NaN in bf16 and fp32) so that
// an element the kernel never writes cannot pass verification.
Status allocate_output(Device device, DType dtype, std::initializer_list<int64_t> sizes,
                       Buffer* buffer, TensorView* view) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  SMLA_RETURN_IF_ERROR(Buffer::allocate(device, bytes, buffer));
  SMLA_RETURN_IF_ERROR(fill_bytes(buffer->data(), device, 0xFF, bytes));
  *view = TensorView::contiguous(buffer->data(), dtype, sizes, device);
  return {};
}

Status copy_to_host(void* dst, const Buffer& src, size_t bytes) {
  return copy_bytes(dst, Device::cpu(), src.data(), src.device(), bytes);
}

}  // namespace

Backend resolve_backend(Backend requested) {
  if (requested != Backend::kAuto) return requested;
  return cuda_available() ? Backend::kCuda : Backend::kCpu;
}

Device device_for(Backend backend) {
  return resolve_backend(backend) == Backend::kCuda ? Device::cuda(0) : Device::cpu();
}

Status check_kernel_flag(const std::string& kernel, Backend backend) {
  if (kernel.empty()) return {};
  // The names do not depend on the problem: list them for any valid one.
  SparsePrefillProblem prefill{1, 1, 1, 512, 512, 1, false, false, device_for(backend)};
  SparseDecodeProblem decode;
  decode.b = decode.s_q = decode.h_q = decode.topk = decode.page_block_size = 1;
  decode.d_qk = 576;
  std::string names;
  auto scan = [&](const std::vector<KernelAvailability>& list) {
    for (const KernelAvailability& k : list) {
      if (k.backend != backend) continue;
      if (k.name == kernel) return true;
      names += (names.empty() ? "" : ", ") + k.name;
    }
    return false;
  };
  if (scan(list_prefill_kernels(prefill)) || scan(list_decode_kernels(decode))) return {};
  return invalid_argument("--kernel = '" + kernel + "' is not a kernel of back end " +
                          backend_name(backend) +
                          " (its kernels: " + (names.empty() ? "none in this build" : names) + ")");
}

Status PrefillRunner::prepare(const verify::PrefillCase& c, Device device,
                              const RunOptions& options) {
  options_ = options;
  problem_ = c.problem;
  problem_.device = device;
  const int64_t s_q = problem_.s_q, h_q = problem_.h_q, d_v = problem_.d_v;
  TensorView out, max_logits, lse;
  SMLA_RETURN_IF_ERROR(allocate_output(device, DType::kBFloat16, {s_q, h_q, d_v}, &out_, &out));
  SMLA_RETURN_IF_ERROR(
      allocate_output(device, DType::kFloat32, {s_q, h_q}, &max_logits_, &max_logits));
  SMLA_RETURN_IF_ERROR(allocate_output(device, DType::kFloat32, {s_q, h_q}, &lse_, &lse));
  if (device.is_cuda()) {
    SMLA_RETURN_IF_ERROR(verify::upload(c, device, &device_inputs_));
    args_ = device_inputs_.args_template;
    args_.out = out;
    args_.max_logits = max_logits;
    args_.lse = lse;
  } else {
    args_ = c.args(out, max_logits, lse);
  }
  // Dispatch takes the first usable kernel of the back end (or the forced one); name it.
  const Backend backend = options.backend == Backend::kAuto
                              ? (device.is_cuda() ? Backend::kCuda : Backend::kCpu)
                              : options.backend;  // as dispatch resolves it
  kernel_.clear();
  for (const KernelAvailability& k : list_prefill_kernels(problem_)) {
    if (k.backend != backend || !k.usable) continue;
    if (!options.kernel.empty() && k.name != options.kernel) continue;
    kernel_ = k.name;
    break;
  }
  if (kernel_.empty()) {
    return unsupported("no " + std::string(backend_name(backend)) +
                       " prefill kernel supports this case" +
                       (options.kernel.empty() ? "" : " under the name " + options.kernel));
  }
  return {};
}

Status PrefillRunner::fetch(verify::PrefillOutputs* host) const {
  verify::allocate_outputs(problem_, host);
  SMLA_RETURN_IF_ERROR(copy_to_host(host->out.data(), out_, host->out.size() * 2));
  SMLA_RETURN_IF_ERROR(
      copy_to_host(host->max_logits.data(), max_logits_, host->max_logits.size() * 4));
  return copy_to_host(host->lse.data(), lse_, host->lse.size() * 4);
}

Status DecodeRunner::prepare(const verify::DecodeCase& c, Device device,
                             const RunOptions& options) {
  options_ = options;
  const SparseDecodeProblem& p = c.problem;
  TensorView out, lse;
  SMLA_RETURN_IF_ERROR(
      allocate_output(device, DType::kBFloat16, {p.b, p.s_q, p.h_q, p.d_v}, &out_, &out));
  SMLA_RETURN_IF_ERROR(allocate_output(device, DType::kFloat32, {p.b, p.s_q, p.h_q}, &lse_, &lse));
  if (device.is_cuda()) {
    SMLA_RETURN_IF_ERROR(verify::upload(c, device, &device_inputs_));
    args_ = device_inputs_.args_template;
    args_.out = out;
    args_.lse = lse;
  } else {
    args_ = c.args(out, lse);
  }
  // Planned once, outside any timed region, as an engine plans once per decode step.
  SparseDecodeProblem problem;
  SMLA_RETURN_IF_ERROR(describe_sparse_decode(args_, &problem));
  SMLA_RETURN_IF_ERROR(plan_sparse_decode(problem, &plan_, options_));
  return Buffer::allocate(device, plan_.workspace_bytes, &workspace_);
}

Status DecodeRunner::fetch(verify::DecodeOutputs* host) const {
  verify::allocate_outputs(plan_.problem, host);
  SMLA_RETURN_IF_ERROR(copy_to_host(host->out.data(), out_, host->out.size() * 2));
  return copy_to_host(host->lse.data(), lse_, host->lse.size() * 4);
}

}  // namespace sparse_mla::cli
