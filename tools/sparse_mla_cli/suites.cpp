// The benchmark suites (suites.h). Shapes and anchors are docs/flashmla_baseline.md's tables; where
// that page leaves a size open it is chosen here, with the reason beside it.
#include "suites.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sparse_mla::cli {

namespace {

// Decode cache length per request. docs/flashmla_baseline.md: V4 cases use s_k = 16384 for both
// caches; V3.2 decode uses the same length (its table gives none). The topk-16384 cases need a
// longer cache so that a request's topk is a real selection, not every token: twice topk.
constexpr int64_t kDecodeCacheTokens = 16384;
constexpr int64_t kLongTopk = 16384;
constexpr int64_t kLongTopkCacheTokens = 2 * kLongTopk;
// Page sizes: V3.2 and the V4 compressed (extra) cache use FlashMLA's 64-token page; the V4
// sliding-window (main) cache uses 256 (docs/flashmla_baseline.md).
constexpr int64_t kPage64 = 64;
constexpr int64_t kV4MainPage = 256;
// Query tokens per request in the decode rows of docs/flashmla_baseline.md (MTP decoding), and
// prefill s_q.
constexpr int64_t kDecodeSq = 2;
constexpr int64_t kPrefillSq = 4096;

BenchCase prefill_case(std::string suite, int64_t d_qk, int64_t h_q, int64_t topk, int64_t s_kv,
                       std::optional<Anchor> anchor) {
  BenchCase c;
  c.suite = std::move(suite);
  c.op = Operation::kSparsePrefill;
  c.prefill = {kPrefillSq, s_kv, h_q, d_qk, topk};
  c.anchor = std::move(anchor);
  return c;
}

BenchCase v32_decode_case(std::string suite, int64_t h_q, int64_t b, int64_t topk,
                          std::optional<Anchor> anchor) {
  BenchCase c;
  c.suite = std::move(suite);
  c.op = Operation::kSparseDecode;
  c.decode.b = b;
  c.decode.s_q = kDecodeSq;
  c.decode.h_q = h_q;
  c.decode.topk = topk;
  c.decode.format = KvCacheFormat::kV32Fp8;
  c.decode.page_block_size = kPage64;
  c.decode.s_kv = topk >= kLongTopk ? kLongTopkCacheTokens : kDecodeCacheTokens;
  c.anchor = std::move(anchor);
  return c;
}

// V4 decode: main (sliding-window) cache, topk 128, page 256, plus the compressed extra cache
// with page 64; extra_topk = 0 means one cache only (the topk-16384 rows).
BenchCase v4_decode_case(std::string suite, int64_t h_q, int64_t b, int64_t s_q, int64_t topk,
                         int64_t extra_topk, std::optional<Anchor> anchor) {
  BenchCase c;
  c.suite = std::move(suite);
  c.op = Operation::kSparseDecode;
  c.decode.b = b;
  c.decode.s_q = s_q;
  c.decode.h_q = h_q;
  c.decode.topk = topk;
  c.decode.format = KvCacheFormat::kV4Fp8;
  if (extra_topk > 0) {
    c.decode.page_block_size = kV4MainPage;
    c.decode.s_kv = kDecodeCacheTokens;
    c.decode.has_extra = true;
    c.decode.extra_topk = extra_topk;
    c.decode.extra_page_block_size = kPage64;
    c.decode.extra_s_kv = kDecodeCacheTokens;
  } else {
    c.decode.page_block_size = kPage64;
    c.decode.s_kv = topk >= kLongTopk ? kLongTopkCacheTokens : kDecodeCacheTokens;
  }
  c.anchor = std::move(anchor);
  return c;
}

Anchor flashmla(double us, double tflops) { return {us, tflops, "FlashMLA"}; }

void add_v32(std::vector<BenchCase>* cases) {
  const std::string s = "v32";
  cases->push_back(prefill_case(s, 576, 128, 2048, 8192, flashmla(3555, 657)));
  cases->push_back(prefill_case(s, 576, 128, 2048, 65536, flashmla(4016, 582)));
  cases->push_back(prefill_case(s, 576, 128, 2048, 131072, flashmla(4142, 564)));
  cases->push_back(v32_decode_case(s, 128, 2, 2048, flashmla(20.1, 114)));
  cases->push_back(v32_decode_case(s, 128, 64, 2048, flashmla(184.5, 396)));
  cases->push_back(v32_decode_case(s, 128, 128, 2048, flashmla(361.7, 404)));
  cases->push_back(v32_decode_case(s, 128, 148, kLongTopk, flashmla(3029, 446)));
}

void add_v4_flash(std::vector<BenchCase>* cases) {
  const std::string s = "v4-flash";
  cases->push_back(prefill_case(s, 512, 64, 512, 8192, flashmla(519, 530)));
  cases->push_back(prefill_case(s, 512, 64, 512, 65536, flashmla(591, 465)));
  cases->push_back(v4_decode_case(s, 64, 2, kDecodeSq, 128, 512, flashmla(14.0, 24)));
  cases->push_back(v4_decode_case(s, 64, 64, kDecodeSq, 128, 512, flashmla(48.6, 221)));
  cases->push_back(v4_decode_case(s, 64, 128, kDecodeSq, 128, 512, flashmla(90.7, 237)));
  cases->push_back(v4_decode_case(s, 64, 256, kDecodeSq, 128, 512, flashmla(173.0, 248)));
  cases->push_back(v4_decode_case(s, 64, 148, kDecodeSq, kLongTopk, 0, flashmla(2025, 314)));
}

void add_v4_pro(std::vector<BenchCase>* cases) {
  const std::string s = "v4-pro";
  cases->push_back(prefill_case(s, 512, 128, 1024, 8192, flashmla(1742, 631)));
  cases->push_back(prefill_case(s, 512, 128, 1024, 65536, flashmla(1911, 575)));
  cases->push_back(v4_decode_case(s, 128, 2, kDecodeSq, 128, 1024, flashmla(16.8, 72)));
  cases->push_back(v4_decode_case(s, 128, 64, kDecodeSq, 128, 1024, flashmla(105.2, 367)));
  cases->push_back(v4_decode_case(s, 128, 128, kDecodeSq, 128, 1024, flashmla(204.1, 379)));
  cases->push_back(v4_decode_case(s, 128, 256, kDecodeSq, 128, 1024, flashmla(401.4, 385)));
  cases->push_back(v4_decode_case(s, 128, 148, kDecodeSq, kLongTopk, 0, flashmla(2686, 473)));
}

// Tensor-parallel head shards: each problem at 8..128 heads per GPU, so the goals "decode at
// h_q=16 <= 0.5x the time at h_q=64" and "prefill at h_q=16/32 keeps >= 60 % of the h_q=128
// TFLOP/s" can be read off. The small-head decode problem is docs/flashmla_baseline.md's: V4, main
// topk 128 page 256 + extra 512 page 64, one query token per request, T requests; FlashMLA pads
// 8/16 heads to 64 and its padded time is the anchor there.
void add_tp_shards(std::vector<BenchCase>* cases) {
  const std::string s = "tp-shards";
  const int64_t heads[] = {8, 16, 32, 64, 128};
  for (int64_t h : heads) {
    cases->push_back(prefill_case(s, 576, h, 2048, 65536,
                                  h == 128 ? std::optional(flashmla(4016, 582)) : std::nullopt));
  }
  for (int64_t h : heads) {
    cases->push_back(prefill_case(s, 512, h, 1024, 65536,
                                  h == 128 ? std::optional(flashmla(1911, 575)) : std::nullopt));
  }
  for (int64_t h : heads) {
    cases->push_back(v32_decode_case(
        s, h, 64, 2048, h == 128 ? std::optional(flashmla(184.5, 396)) : std::nullopt));
  }
  struct SmallHeadAnchor {
    int64_t requests;
    double padded_us;
  };
  const SmallHeadAnchor small[] = {{1, 16.0}, {12, 20.0}, {64, 43.3}, {128, 42.7}};
  for (const SmallHeadAnchor& t : small) {
    for (int64_t h : {8, 16, 32, 64}) {
      std::optional<Anchor> anchor;
      if (h == 8 || h == 16) anchor = Anchor{t.padded_us, 0, "FlashMLA padded to 64 heads"};
      cases->push_back(v4_decode_case(s, h, t.requests, 1, 128, 512, anchor));
    }
  }
}

// MTP verification under tensor parallelism: a request's s_q tokens (one plus drafts) whose index
// lists share a fraction of their entries (0, 0.5, 0.9: real drafts overlap heavily), at the head
// shards whose s_q x h_q rows fit one 64-row tile, so the index union of the Hopper decode
// (SMLA_DECODE_INDEX_UNION, docs/kernels/index_union.md) can be read against the tokens' own
// lists. V3.2 (topk 2048) with one draft at 16 and 32 heads; V4 (128 + 512) with three at 16.
void add_draft_tokens(std::vector<BenchCase>* cases) {
  const std::string s = "draft-tokens";
  for (int64_t h : {16, 32}) {
    for (int64_t b : {1, 64}) {
      for (double shared : {0.0, 0.5, 0.9}) {
        BenchCase c = v32_decode_case(s, h, b, 2048, std::nullopt);
        c.decode.shared_indices = shared;
        cases->push_back(c);
      }
    }
  }
  for (int64_t b : {1, 12, 64, 128}) {
    for (double shared : {0.0, 0.5, 0.9}) {
      BenchCase c = v4_decode_case(s, 16, b, 4, 128, 512, std::nullopt);
      c.decode.shared_indices = shared;
      cases->push_back(c);
    }
  }
}

// DeepSeek V4.1 decode (issue 24): a v41_fp8 sliding-window cache (page 256, topk 128) with a
// v41_fp4 compressed cache (page 64, topk 512), h_q 64 and 16 (V4.1's head count and a TP-4
// shard), one query token or one plus three drafts. Each case is followed by the same problem
// stored as V4's 584-B records in both caches (what Hopper engines do today), so the time ratio
// can be read against the bytes ratio (528 + 288 B against 2 x 576 B per retrieved token pair).
void add_v41(std::vector<BenchCase>* cases) {
  const std::string s = "v41";
  for (int64_t h : {64, 16}) {
    for (int64_t s_q : {1, 4}) {
      for (int64_t b : {1, 12, 64, 128, 256}) {
        BenchCase v4 = v4_decode_case(s, h, b, s_q, 128, 512, std::nullopt);
        BenchCase v41 = v4;
        v41.decode.format = KvCacheFormat::kV41Fp8;
        v41.decode.extra_format = KvCacheFormat::kV41Fp4;
        cases->push_back(v41);
        cases->push_back(v4);
      }
    }
  }
}

}  // namespace

std::string shared_indices_text(double shared_indices) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", shared_indices);
  return text;
}

std::string BenchCase::name() const {
  if (op == Operation::kSparsePrefill) {
    const PrefillShape& p = prefill;
    return "prefill d_qk=" + std::to_string(p.d_qk) + " h_q=" + std::to_string(p.h_q) +
           " topk=" + std::to_string(p.topk) + " s_q=" + std::to_string(p.s_q) +
           " s_kv=" + std::to_string(p.s_kv);
  }
  const DecodeShape& d = decode;
  // A layout is named only when it is not the format's own, an extra format only when it is not
  // the main one: the names of cases without either stay what they always were.
  auto layout_text = [](KvCacheFormat f, KvLayout l) {
    return resolve_kv_layout(f, l) == resolve_kv_layout(f, KvLayout::kDefault)
               ? std::string()
               : std::string(" ") + kv_layout_name(l);
  };
  // A bf16 cache names its d_qk only when it is not 576.
  const std::string d_qk_text = d.format == KvCacheFormat::kBf16 && d.d_qk() != 576
                                    ? " d_qk=" + std::to_string(d.d_qk())
                                    : std::string();
  std::string n = "decode " + std::string(kv_cache_format_name(d.format)) +
                  layout_text(d.format, d.kv_layout) + d_qk_text + " h_q=" + std::to_string(d.h_q) +
                  " b=" + std::to_string(d.b) + " s_q=" + std::to_string(d.s_q) +
                  " topk=" + std::to_string(d.topk) + "(p" + std::to_string(d.page_block_size) +
                  ")";
  if (d.has_extra) {
    std::string extra =
        d.extra() != d.format ? std::string(" ") + kv_cache_format_name(d.extra()) : std::string();
    extra += layout_text(d.extra(), d.extra_kv_layout);
    n += "+" + std::to_string(d.extra_topk) + "(p" + std::to_string(d.extra_page_block_size) +
         extra + ")";
  }
  if (d.shared_indices > 0) n += " shared=" + shared_indices_text(d.shared_indices);
  return n;
}

std::string BenchCase::head_group() const {
  std::string n = name();
  const std::string key = " h_q=" + std::to_string(h_q());
  size_t at = n.find(key);
  if (at != std::string::npos) n.erase(at, key.size());
  return n;
}

std::vector<std::string> BenchCase::flags() const {
  auto i = [](int64_t v) { return std::to_string(v); };
  if (op == Operation::kSparsePrefill) {
    const PrefillShape& p = prefill;
    return {"--op",  "prefill", "--s_q",  i(p.s_q),  "--s_kv", i(p.s_kv),
            "--h_q", i(p.h_q),  "--d_qk", i(p.d_qk), "--topk", i(p.topk)};
  }
  const DecodeShape& d = decode;
  std::vector<std::string> f = {"--op",
                                "decode",
                                "--format",
                                kv_cache_format_name(d.format),
                                "--b",
                                i(d.b),
                                "--s_q",
                                i(d.s_q),
                                "--h_q",
                                i(d.h_q),
                                "--topk",
                                i(d.topk),
                                "--page_block_size",
                                i(d.page_block_size),
                                "--s_kv",
                                i(d.s_kv)};
  if (d.kv_layout != KvLayout::kDefault) {
    f.insert(f.end(), {"--kv_layout", kv_layout_name(d.kv_layout)});
  }
  if (d.format == KvCacheFormat::kBf16 && d.d_qk() != 576)
    f.insert(f.end(), {"--d_qk", i(d.d_qk())});
  if (d.has_extra) {
    for (const std::string& s :
         {std::string("--extra_topk"), i(d.extra_topk), std::string("--extra_page_block_size"),
          i(d.extra_page_block_size), std::string("--extra_s_kv"), i(d.extra_s_kv)}) {
      f.push_back(s);
    }
    if (d.extra_format)
      f.insert(f.end(), {"--extra_format", kv_cache_format_name(*d.extra_format)});
    if (d.extra_kv_layout != KvLayout::kDefault) {
      f.insert(f.end(), {"--extra_kv_layout", kv_layout_name(d.extra_kv_layout)});
    }
  }
  if (d.shared_indices > 0) {
    f.insert(f.end(), {"--shared_indices", shared_indices_text(d.shared_indices)});
  }
  return f;
}

BenchCase BenchCase::scaled(double scale) const {
  BenchCase c = *this;
  auto shrink = [scale](int64_t n) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(n) * scale)));
  };
  if (op == Operation::kSparsePrefill) {
    c.prefill.s_q = shrink(prefill.s_q);
  } else {
    // Decode batches shrink by sqrt(scale), keeping at least min(b, 2) requests: at the CPU's
    // 0.01, b = 2 / 64 / 128 / 256 become 2 / 6 / 13 / 26, distinct problems with work for every
    // thread, instead of all collapsing to one request.
    const double batch_scale = std::sqrt(scale);
    c.decode.b = std::max<int64_t>(
        std::min<int64_t>(decode.b, 2),
        static_cast<int64_t>(std::llround(static_cast<double>(decode.b) * batch_scale)));
  }
  return c;
}

std::vector<std::string> suite_names() {
  return {"v32", "v4-flash", "v4-pro", "tp-shards", "draft-tokens", "v41", "v4", "all"};
}

Status suite_cases(std::string_view suite, std::vector<BenchCase>* cases) {
  cases->clear();
  if (suite == "v32") {
    add_v32(cases);
  } else if (suite == "v4-flash") {
    add_v4_flash(cases);
  } else if (suite == "v4-pro") {
    add_v4_pro(cases);
  } else if (suite == "tp-shards") {
    add_tp_shards(cases);
  } else if (suite == "draft-tokens") {
    add_draft_tokens(cases);
  } else if (suite == "v41") {
    add_v41(cases);
  } else if (suite == "v4") {
    add_v4_flash(cases);
    add_v4_pro(cases);
  } else if (suite == "all") {
    add_v32(cases);
    add_v4_flash(cases);
    add_v4_pro(cases);
    add_tp_shards(cases);
    add_draft_tokens(cases);
    add_v41(cases);
    // v41's V4 companions at one query token are tp-shards cases: run each problem once.
    std::vector<std::string> seen;
    std::erase_if(*cases, [&](const BenchCase& c) {
      const std::string n = c.name();
      if (std::find(seen.begin(), seen.end(), n) != seen.end()) return true;
      seen.push_back(n);
      return false;
    });
  } else {
    std::string known;
    for (const std::string& n : suite_names()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("--suite = '" + std::string(suite) + "' is not one of: " + known);
  }
  return {};
}

}  // namespace sparse_mla::cli
