// Small valid calls of the public API, shared by the validation tests: every tensor lives in a
// std::vector the fixture owns, and the outputs start as sentinels, so a test can mutate the
// arguments and check that a rejected call left the outputs as they were.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sparse_mla/sparse_mla.h"

namespace sparse_mla::test_support {

inline constexpr uint16_t kSentinelBf16 = 0x7fc1;  // a NaN pattern no kernel writes
inline constexpr float kSentinelF32 = -12345.0f;

// True if every element still holds the sentinel (bitwise for bf16: the sentinel is a NaN).
template <class T>
bool all_equal(const std::vector<T>& values, T sentinel) {
  return std::all_of(values.begin(), values.end(), [&](T v) { return v == sentinel; });
}

// A small valid prefill call: s_q 3, s_kv 40, h_q 4, d_qk 576, topk 8, all tensors contiguous.
struct PrefillFixture {
  static constexpr int64_t s_q = 3, s_kv = 40, h_q = 4, d_qk = 576, topk = 8;
  std::vector<uint16_t> q = std::vector<uint16_t>(s_q * h_q * d_qk, 0x3c00);
  std::vector<uint16_t> kv = std::vector<uint16_t>(s_kv * d_qk, 0x3c00);
  std::vector<int32_t> indices = std::vector<int32_t>(s_q * topk, 1);
  std::vector<float> sink = std::vector<float>(h_q, 0.5f);
  std::vector<int32_t> lengths = std::vector<int32_t>(s_q, 4);
  std::vector<uint16_t> out = std::vector<uint16_t>(s_q * h_q * 512, kSentinelBf16);
  std::vector<float> max_logits = std::vector<float>(s_q * h_q, kSentinelF32);
  std::vector<float> lse = std::vector<float>(s_q * h_q, kSentinelF32);

  SparsePrefillArgs args() {
    SparsePrefillArgs a;
    a.q = TensorView::contiguous(q.data(), DType::kBFloat16, {s_q, h_q, d_qk});
    a.kv = TensorView::contiguous(kv.data(), DType::kBFloat16, {s_kv, 1, d_qk});
    a.indices = TensorView::contiguous(indices.data(), DType::kInt32, {s_q, 1, topk});
    a.sm_scale = 0.04f;
    a.attn_sink = TensorView::contiguous(sink.data(), DType::kFloat32, {h_q});
    a.topk_length = TensorView::contiguous(lengths.data(), DType::kInt32, {s_q});
    a.out = TensorView::contiguous(out.data(), DType::kBFloat16, {s_q, h_q, 512});
    a.max_logits = TensorView::contiguous(max_logits.data(), DType::kFloat32, {s_q, h_q});
    a.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {s_q, h_q});
    return a;
  }

  bool outputs_untouched() const {
    return all_equal(out, kSentinelBf16) && all_equal(max_logits, kSentinelF32) &&
           all_equal(lse, kSentinelF32);
  }
};

// A small valid v4_fp8 decode call with an extra cache: b 2, s_q 2, h_q 8, topk 16 (+ 8 extra).
struct DecodeFixture {
  static constexpr int64_t b = 2, s_q = 2, h_q = 8, d_qk = 512, topk = 16, extra_topk = 8;
  static constexpr int64_t page = 5, blocks = 4, extra_page = 2, extra_blocks = 6;
  std::vector<uint16_t> q = std::vector<uint16_t>(b * s_q * h_q * d_qk, 0x3c00);
  std::vector<uint8_t> cache, extra_cache;
  std::vector<int32_t> indices = std::vector<int32_t>(b * s_q * topk, 3);
  std::vector<int32_t> extra_indices = std::vector<int32_t>(b * s_q * extra_topk, 1);
  std::vector<int32_t> lengths = std::vector<int32_t>(b, 10);
  std::vector<int32_t> extra_lengths = std::vector<int32_t>(b * s_q, 5);
  std::vector<float> sink = std::vector<float>(h_q, 0.0f);
  std::vector<uint16_t> out = std::vector<uint16_t>(b * s_q * h_q * 512, kSentinelBf16);
  std::vector<float> lse = std::vector<float>(b * s_q * h_q, kSentinelF32);
  int64_t block_stride = 0, extra_block_stride = 0;

  DecodeFixture() {
    block_stride = kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, page, d_qk);
    extra_block_stride = kv_cache_min_block_stride(KvCacheFormat::kV4Fp8, extra_page, d_qk);
    cache.assign(block_stride * blocks + 16, 0);
    extra_cache.assign(extra_block_stride * extra_blocks + 16, 0);
  }

  static const void* aligned(const std::vector<uint8_t>& v) {
    auto p = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<const void*>((p + 15) / 16 * 16);
  }

  SparseDecodeArgs args() {
    SparseDecodeArgs a;
    a.q = TensorView::contiguous(q.data(), DType::kBFloat16, {b, s_q, h_q, d_qk});
    a.kv_cache = KvCacheView{aligned(cache), KvCacheFormat::kV4Fp8,  blocks,       page,
                             block_stride,   static_cast<int>(d_qk), Device::cpu()};
    a.indices = TensorView::contiguous(indices.data(), DType::kInt32, {b, s_q, topk});
    a.topk_length = TensorView::contiguous(lengths.data(), DType::kInt32, {b});
    a.attn_sink = TensorView::contiguous(sink.data(), DType::kFloat32, {h_q});
    a.extra_kv_cache =
        KvCacheView{aligned(extra_cache), KvCacheFormat::kV4Fp8,  extra_blocks, extra_page,
                    extra_block_stride,   static_cast<int>(d_qk), Device::cpu()};
    a.extra_indices =
        TensorView::contiguous(extra_indices.data(), DType::kInt32, {b, s_q, extra_topk});
    a.extra_topk_length = TensorView::contiguous(extra_lengths.data(), DType::kInt32, {b, s_q});
    a.out = TensorView::contiguous(out.data(), DType::kBFloat16, {b, s_q, h_q, 512});
    a.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {b, s_q, h_q});
    return a;
  }

  bool outputs_untouched() const {
    return all_equal(out, kSentinelBf16) && all_equal(lse, kSentinelF32);
  }
};

}  // namespace sparse_mla::test_support
