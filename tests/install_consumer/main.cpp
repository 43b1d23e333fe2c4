// The program of tests/install_consumer/: calls an installed sparse-mla through its public API
// only. One CPU sparse prefill whose result is known exactly, a bad argument's error, and what
// the package says about itself (version, CUDA compiled in) against the library it links.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sparse_mla/sparse_mla.h"

using namespace sparse_mla;

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "install_consumer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main() {
  if (std::string(version_string()) != PACKAGE_VERSION) {
    return fail(std::string("the library is version ") + version_string() +
                " but its package says " + PACKAGE_VERSION);
  }

  // s_q 1, h_q 2, d_qk 512, s_kv 3, topk 2. The query's only valid slot is KV row 2 (-1 is
  // unused), so its softmax weight is exactly 1: out must equal row 2's first 512 values, and
  // lse and max_logits its score sm_scale * q.k.
  const int64_t s_q = 1, h_q = 2, d_qk = 512, d_v = 512, s_kv = 3, topk = 2;
  std::vector<uint16_t> q(s_q * h_q * d_qk), kv(s_kv * d_qk);
  for (size_t i = 0; i < q.size(); ++i) q[i] = float_to_bf16(std::sin(0.1f * i) * 0.1f);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = float_to_bf16(std::cos(0.3f * i) * 0.1f);
  std::vector<int32_t> indices = {2, -1};
  std::vector<uint16_t> out(s_q * h_q * d_v);
  std::vector<float> max_logits(s_q * h_q), lse(s_q * h_q);

  SparsePrefillArgs args;
  args.q = TensorView::contiguous(q.data(), DType::kBFloat16, {s_q, h_q, d_qk});
  args.kv = TensorView::contiguous(kv.data(), DType::kBFloat16, {s_kv, 1, d_qk});
  args.indices = TensorView::contiguous(indices.data(), DType::kInt32, {s_q, 1, topk});
  args.sm_scale = 1.0f / std::sqrt(float(d_qk));
  args.out = TensorView::contiguous(out.data(), DType::kBFloat16, {s_q, h_q, d_v});
  args.max_logits = TensorView::contiguous(max_logits.data(), DType::kFloat32, {s_q, h_q});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {s_q, h_q});
  if (Status s = sparse_prefill(args, RunOptions{.backend = Backend::kCpu}); !s.ok()) {
    return fail("sparse_prefill failed: " + s.message());
  }
  for (int64_t h = 0; h < h_q; ++h) {
    for (int64_t j = 0; j < d_v; ++j) {
      if (out[h * d_v + j] != kv[2 * d_qk + j]) {
        return fail("out[0," + std::to_string(h) + "," + std::to_string(j) +
                    "] = " + std::to_string(bf16_to_float(out[h * d_v + j])) +
                    ", want KV row 2's " + std::to_string(bf16_to_float(kv[2 * d_qk + j])));
      }
    }
    double score = 0.0;
    for (int64_t j = 0; j < d_qk; ++j) {
      score += double(bf16_to_float(q[h * d_qk + j])) * bf16_to_float(kv[2 * d_qk + j]);
    }
    score *= args.sm_scale;
    for (float got : {lse[h], max_logits[h]}) {
      if (!(std::fabs(got - score) <= 1e-4 + 1e-3 * std::fabs(score))) {
        return fail("head " + std::to_string(h) + ": lse " + std::to_string(lse[h]) +
                    ", max_logits " + std::to_string(max_logits[h]) + ", want " +
                    std::to_string(score));
      }
    }
  }

  // A bad argument comes back as a Status that names it.
  args.sm_scale = -1.0f;
  Status bad = sparse_prefill(args, RunOptions{.backend = Backend::kCpu});
  if (bad.ok() || bad.message().find("sm_scale") == std::string::npos) {
    return fail("sm_scale -1 gave \"" + bad.message() + "\", want an error naming sm_scale");
  }

  // CUDA kernel variants are listed exactly when the package says CUDA is compiled in.
  SparsePrefillProblem problem;
  problem.s_q = s_q, problem.s_kv = s_kv, problem.h_q = h_q, problem.d_qk = d_qk;
  problem.topk = topk;
  std::vector<KernelAvailability> kernels = list_prefill_kernels(problem);
  for (KernelAvailability& k : list_decode_kernels(SparseDecodeProblem{})) kernels.push_back(k);
  bool lists_cuda = false;
  for (const KernelAvailability& k : kernels) {
    if (k.backend == Backend::kCuda) lists_cuda = true;
  }
  if (lists_cuda != bool(PACKAGE_WITH_CUDA)) {
    return fail(std::string("the package says CUDA is ") + (PACKAGE_WITH_CUDA ? "" : "not ") +
                "compiled in, but the library lists " + (lists_cuda ? "" : "no ") +
                "CUDA kernel variants");
  }

  std::printf(
      "install_consumer: sparse-mla %s (%s CUDA): prefill out, lse, max_logits and the "
      "sm_scale error as expected\n",
      version_string(), PACKAGE_WITH_CUDA ? "with" : "without");
  return 0;
}
