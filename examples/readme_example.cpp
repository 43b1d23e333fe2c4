// The C++ usage example of README.md (built and run by ctest as `readme_example`):
// one sparse prefill and one planned FP8 sparse decode on the CPU back end.
#include <cmath>
#include <cstdio>
#include <vector>

#include "sparse_mla/sparse_mla.h"

using namespace sparse_mla;

static uint16_t bf16(float x) { return float_to_bf16(x); }

int main() {
  // ---- sparse prefill: s_q 2 query tokens, h_q 16 heads, d_qk 512, 4 KV rows, topk 3 ----------
  const int64_t s_q = 2, h_q = 16, d_qk = 512, s_kv = 4, topk = 3;
  std::vector<uint16_t> q(s_q * h_q * d_qk), kv(s_kv * d_qk);
  for (size_t i = 0; i < q.size(); ++i) q[i] = bf16(std::sin(0.1f * i) * 0.1f);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = bf16(std::cos(0.3f * i) * 0.1f);
  std::vector<int32_t> indices = {0, 2, -1,  // token 0 attends to rows 0 and 2 (-1 = unused)
                                  3, 1, 1};  // token 1 attends to row 3 and twice to row 1
  std::vector<uint16_t> out(s_q * h_q * 512);
  std::vector<float> max_logits(s_q * h_q), lse(s_q * h_q);

  SparsePrefillArgs prefill;
  prefill.q = TensorView::contiguous(q.data(), DType::kBFloat16, {s_q, h_q, d_qk});
  prefill.kv = TensorView::contiguous(kv.data(), DType::kBFloat16, {s_kv, 1, d_qk});
  prefill.indices = TensorView::contiguous(indices.data(), DType::kInt32, {s_q, 1, topk});
  prefill.sm_scale = 1.0f / std::sqrt(float(d_qk));
  prefill.out = TensorView::contiguous(out.data(), DType::kBFloat16, {s_q, h_q, 512});
  prefill.max_logits = TensorView::contiguous(max_logits.data(), DType::kFloat32, {s_q, h_q});
  prefill.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {s_q, h_q});
  if (Status s = sparse_prefill(prefill); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  std::printf("prefill: lse[0,0] = %.4f, out[0,0,0] = %.4f\n", lse[0], bf16_to_float(out[0]));

  // ---- FP8 decode: quantize a 2-block v4_fp8 cache (page 64), then plan + run ----------------
  const int64_t blocks = 2, page = 64, b = 1, dec_s_q = 1, dec_topk = 4;
  std::vector<uint16_t> rows(blocks * page * d_qk);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = bf16(std::sin(0.01f * i) * 0.2f);
  const int64_t stride = kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, page, d_qk);
  std::vector<uint8_t> cache_bytes(blocks * stride + 16);
  void* cache_data =
      cache_bytes.data() + (16 - reinterpret_cast<uintptr_t>(cache_bytes.data()) % 16) % 16;
  KvCacheView cache{cache_data, KvCacheFormat::kV4Fp8, blocks, page, stride, int(d_qk)};
  TensorView rows_view =
      TensorView::contiguous(rows.data(), DType::kBFloat16, {blocks, page, 1, d_qk});
  if (Status s = quantize_kv_cache(rows_view, cache); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }

  std::vector<uint16_t> dq(b * dec_s_q * h_q * d_qk, bf16(0.05f));
  std::vector<int32_t> slots = {5, 64 + 7, 100, -1};  // physical slot = block * page + offset
  std::vector<uint16_t> dout(b * dec_s_q * h_q * 512);
  std::vector<float> dlse(b * dec_s_q * h_q);
  SparseDecodeArgs decode;
  decode.q = TensorView::contiguous(dq.data(), DType::kBFloat16, {b, dec_s_q, h_q, d_qk});
  decode.kv_cache = cache;
  decode.indices = TensorView::contiguous(slots.data(), DType::kInt32, {b, dec_s_q, dec_topk});
  decode.out = TensorView::contiguous(dout.data(), DType::kBFloat16, {b, dec_s_q, h_q, 512});
  decode.lse = TensorView::contiguous(dlse.data(), DType::kFloat32, {b, dec_s_q, h_q});

  SparseDecodeProblem problem;
  DecodePlan plan;
  Status s = describe_sparse_decode(decode, &problem);
  if (s.ok()) s = plan_sparse_decode(problem, &plan);  // once per decode step
  std::vector<uint8_t> workspace(plan.workspace_bytes);
  if (s.ok()) s = sparse_decode(decode, plan, workspace.data(), workspace.size());
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  std::printf("decode (%s): lse[0,0,0] = %.4f\n", plan.kernel.c_str(), dlse[0]);
  return std::isfinite(lse[0]) && std::isfinite(dlse[0]) ? 0 : 1;
}
