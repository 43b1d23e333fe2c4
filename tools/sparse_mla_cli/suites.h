// Benchmark cases and the named suites of `sparse-mla bench`: the rows of docs/flashmla_baseline.md
// (DeepSeek V3.2, V4 Flash, V4 Pro prefill and decode at full size, with FlashMLA's H200 time
// as the anchor), `tp-shards` (the same problems at 8..128 heads per GPU) and `v41` (DeepSeek
// V4.1's decode on its own records, each beside the same problem stored as v4_fp8). A case can be
// scaled down (fewer query tokens / requests) so the suites also run on a CPU.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparse_mla/kernel_registry.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cli {

// FlashMLA's sparse kernels on one H200 (docs/flashmla_baseline.md, run of 2026-11-29, +-3 %
// noise).
struct Anchor {
  double us = 0;      // kernel time (decode: split kernel + combine)
  double tflops = 0;  // as FlashMLA's own counter reported it; 0 = not in the table
  std::string note;   // e.g. "FlashMLA padded to 64 heads"
};

struct PrefillShape {
  int64_t s_q = 0, s_kv = 0, h_q = 0, d_qk = 0, topk = 0;
};

struct DecodeShape {
  int64_t b = 0, s_q = 0, h_q = 0, topk = 0;
  KvCacheFormat format = KvCacheFormat::kV32Fp8;
  KvLayout kv_layout = KvLayout::kDefault;  // kDefault: the format's own
  int64_t page_block_size = 0;
  int64_t s_kv = 0;  // mean cache tokens per request (verify::DecodeRecipe::request_tokens)
  bool has_extra = false;
  std::optional<KvCacheFormat> extra_format;      // nullopt: the main cache's
  KvLayout extra_kv_layout = KvLayout::kDefault;  // kDefault: the extra format's own
  int64_t extra_topk = 0, extra_page_block_size = 0, extra_s_kv = 0;
  // Draft tokens' share of their request's token-0 index entries (verify::DecodeRecipe).
  double shared_indices = 0;
  int bf16_d_qk = 576;  // a bf16 cache's d_qk, 576 or 512 (the FP8 formats fix their own)

  KvCacheFormat extra() const { return extra_format.value_or(format); }
  // The cache's d_qk (bf16: bf16_d_qk).
  int d_qk() const {
    const int d = kv_cache_format_info(format).d_qk;
    return d != 0 ? d : bf16_d_qk;
  }
};

// A shared_indices value as names and flags write it ("0.75").
std::string shared_indices_text(double shared_indices);

struct BenchCase {
  std::string suite;  // "v32", "v4-flash", ...; "custom" for a case given by flags
  Operation op = Operation::kSparsePrefill;
  PrefillShape prefill;
  DecodeShape decode;
  std::optional<Anchor> anchor;  // only meaningful for the full-size case on an H200

  // Full-size name in the project vocabulary, e.g. "prefill d_qk=576 h_q=128 topk=2048
  // s_q=4096 s_kv=8192" or "decode v41_fp8 h_q=64 b=1 s_q=1 topk=128(p256)+512(p64 v41_fp4)"
  // (a layout or extra format other than the default is named); the key that result files are
  // compared by.
  std::string name() const;
  // The same name without h_q: cases of one problem at several head counts share it.
  std::string head_group() const;
  int64_t h_q() const { return op == Operation::kSparsePrefill ? prefill.h_q : decode.h_q; }
  // `sparse-mla bench` flags that run this case alone (at full size).
  std::vector<std::string> flags() const;
  // Fewer query tokens (prefill s_q * scale, at least 1) or requests (decode b * sqrt(scale), at
  // least min(b, 2)); other sizes unchanged, so the per-query work and the cache size per request
  // stay those of the full case.
  BenchCase scaled(double scale) const;
};

// "v32", "v4-flash", "v4-pro", "tp-shards", "draft-tokens", "v41", and the unions "v4" (flash +
// pro) and "all" (every case once: a case of two suites, by name, runs in the first).
std::vector<std::string> suite_names();
inline constexpr std::string_view kDefaultSuite = "v4";
// Cases of one suite, in order; invalid_argument naming the suite if it is unknown.
Status suite_cases(std::string_view suite, std::vector<BenchCase>* cases);

}  // namespace sparse_mla::cli
