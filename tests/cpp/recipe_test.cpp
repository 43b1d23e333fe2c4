// The SPEC §5 recipe delivers what the back-end tests rely on: determinism per seed, every
// invalid-index kind, lonely queries, all topk_length kinds, all sink kinds, padded layouts with
// NaN padding, and NaN poison in exactly the rows no valid slot references (decode: in the
// quantized cache, so it survives quantization).
#include "verify/recipe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sparse_mla/sparse_mla.h"

namespace sparse_mla::verify {
namespace {

TEST(Recipe, CacheBytesNoTokenOwnsAreNaN) {
  using enum KvCacheFormat;
  using enum KvLayout;
  const std::pair<KvCacheFormat, KvLayout> caches[] = {
      {kV32Fp8, kDefault},          {kV4Fp8, kDefault},    {kV41Fp8, kPageSplit},
      {kV41Fp8, kTokenInterleaved}, {kV41Fp4, kPageSplit}, {kV41Fp4, kTokenInterleaved}};
  for (const auto& [format, layout] : caches) {
    SCOPED_TRACE(std::string(kv_cache_format_name(format)) + " " + kv_layout_name(layout));
    DecodeRecipe r;
    r.format = format;
    r.kv_layout = layout;
    r.page_block_size = 5;
    r.topk_length = false;  // every listed slot is attended
    DecodeCase c;
    ASSERT_TRUE(make_decode_case(r, &c).ok());
    const KvCacheFormatInfo& info = kv_cache_format_info(format, layout);
    // The poison stays outside the records of referenced tokens: they decode without NaN.
    const TensorView& idx = c.indices_view;
    for (int64_t b = 0; b < idx.sizes[0]; ++b) {
      for (int64_t k = 0; k < idx.sizes[2]; ++k) {
        const int32_t slot = c.indices[b * idx.strides[0] + k];
        if (slot < 0 || slot >= c.cache_view.num_slots()) continue;
        std::vector<float> row(c.cache_view.d_qk);
        dequantize_kv_token(c.cache_view, slot, row.data());
        for (float v : row) ASSERT_FALSE(std::isnan(v)) << "slot " << slot;
      }
    }
    const int64_t page = c.cache_view.page_block_size, stride = c.cache_view.block_stride_bytes;
    // Every format's records fill exactly page * bytes_per_token bytes: the scale rows of the
    // V4.1 page_split layouts have no padding byte, v4_fp8's have one.
    const int64_t used = page * kv_cache_bytes_per_token(format, c.cache_view.d_qk);
    for (int64_t blk = 0; blk < c.cache_view.num_blocks; ++blk) {
      const uint8_t* block = c.cache.data() + blk * stride;
      if (format == kV4Fp8) {
        for (int64_t t = 0; t < page; ++t) {  // the 8th byte of each 8-byte scale row
          EXPECT_EQ(block[page * info.data_row_bytes + t * 8 + 7], 0xff) << "token " << t;
        }
      }
      ASSERT_LT(used, stride) << "padded_strides leaves a tail to poison";
      for (int64_t i = used; i < stride; ++i) ASSERT_EQ(block[i], 0xff) << "block " << blk;
    }
  }
}

TEST(Recipe, PrefillIsDeterministicAndCoversTheMixture) {
  PrefillRecipe r;
  r.s_q = 64;
  r.s_kv = 300;
  r.topk = 100;
  r.h_q = 32;
  PrefillCase a, b;
  ASSERT_TRUE(make_prefill_case(r, &a).ok());
  ASSERT_TRUE(make_prefill_case(r, &b).ok());
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(0, std::memcmp(a.q.data(), b.q.data(), a.q.size() * 2));

  std::set<int32_t> invalid_kinds;
  for (int32_t v : a.indices) {
    if (v < 0 || v >= r.s_kv) invalid_kinds.insert(v);
  }
  for (int32_t v : {INT_MIN, -123456, -1, 300, 114514, INT_MAX}) {
    EXPECT_TRUE(invalid_kinds.count(v)) << v;
  }
  std::set<int32_t> lengths(a.topk_length.begin(), a.topk_length.end());
  EXPECT_TRUE(lengths.count(0) && lengths.count(1) && lengths.count(100));
  EXPECT_GT(lengths.size(), 4u);  // and values in between
  // and values outside [0, topk] that the back ends must clamp
  EXPECT_TRUE(std::any_of(lengths.begin(), lengths.end(), [](int32_t n) { return n < 0; }));
  EXPECT_TRUE(std::any_of(lengths.begin(), lengths.end(), [](int32_t n) { return n > 100; }));

  int pos_inf = 0, neg_inf = 0, finite = 0;
  for (int64_t h = 0; h < r.h_q; ++h) {
    float s = a.attn_sink[h * a.attn_sink_view->strides[0]];
    pos_inf += s == INFINITY;
    neg_inf += s == -INFINITY;
    finite += std::isfinite(s);
  }
  EXPECT_GT(pos_inf, 0);
  EXPECT_GT(neg_inf, 0);
  EXPECT_GT(finite, 0);

  EXPECT_FALSE(a.q_view.is_contiguous());
  EXPECT_TRUE(std::isnan(bf16_to_float(a.q[r.d_qk])));  // padding after the first row
  EXPECT_LT(a.valid_slots, a.attended);
}

TEST(Recipe, PrefillPoisonsExactlyTheUnreferencedRows) {
  PrefillRecipe r;
  r.s_q = 16;
  r.s_kv = 2000;
  PrefillCase c;
  ASSERT_TRUE(make_prefill_case(r, &c).ok());
  std::vector<bool> referenced(r.s_kv, false);
  const int64_t idx_stride = c.indices_view.strides[0], len_stride = c.topk_length_view->strides[0];
  for (int64_t i = 0; i < r.s_q; ++i) {
    int64_t len = std::clamp<int64_t>(c.topk_length[i * len_stride], 0, r.topk);
    for (int64_t k = 0; k < len; ++k) {
      int32_t v = c.indices[i * idx_stride + k];
      if (v >= 0 && v < r.s_kv) referenced[v] = true;
    }
  }
  const int64_t kv_stride = c.kv_view.strides[0];
  for (int64_t j = 0; j < r.s_kv; ++j) {
    ASSERT_EQ(std::isnan(bf16_to_float(c.kv[j * kv_stride])), !referenced[j]) << j;
  }
}

TEST(Recipe, DecodePoisonSurvivesQuantization) {
  for (KvCacheFormat f : {KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8, KvCacheFormat::kBf16}) {
    DecodeRecipe r;
    r.format = f;
    r.b = 3;
    r.s_q = 2;
    r.page_block_size = 53;
    r.extra_cache = true;
    DecodeCase c;
    ASSERT_TRUE(make_decode_case(r, &c).ok());
    const int64_t slots = c.cache_view.num_slots();
    std::vector<float> row(c.problem.d_qk);
    int64_t poisoned = 0;
    for (int64_t slot = 0; slot < slots; ++slot) {
      dequantize_kv_token(c.cache_view, slot, row.data());
      bool any_nan = false;
      for (float x : row) any_nan = any_nan || std::isnan(x);
      poisoned += any_nan;
    }
    EXPECT_EQ(poisoned, slots - c.retrieved_main) << kv_cache_format_name(f);
    EXPECT_GT(c.retrieved_extra, 0);
  }
}

TEST(Recipe, LargeBenchCaseIsQuick) {
  // The largest benchmark shape's index lists and q at 1/16 of s_q: generation must stay
  // proportional (seconds for the full bench case).
  PrefillRecipe r;
  r.s_q = 256;
  r.h_q = 128;
  r.topk = 2048;
  r.s_kv = 131072;
  PrefillCase c;
  ASSERT_TRUE(make_prefill_case(r, &c).ok());
  EXPECT_EQ(c.problem.s_kv, 131072);
}

TEST(Recipe, RejectsImpossibleRecipes) {
  PrefillRecipe r;
  r.d_qk = 128;
  PrefillCase c;
  EXPECT_FALSE(make_prefill_case(r, &c).ok());
  DecodeRecipe d;
  d.format = KvCacheFormat::kV4Fp8;
  d.d_qk = 576;  // v4 is 512 only
  DecodeCase dc;
  EXPECT_FALSE(make_decode_case(d, &dc).ok());
  DecodeRecipe shared;
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    shared.shared_indices = bad;
    EXPECT_FALSE(make_decode_case(shared, &dc).ok()) << bad;
  }
}

// Draft tokens share their request's token-0 entries at about the recipe's rate, in both lists;
// token 0 itself is left as drawn; 0 gives independent lists. (Empty queries, which keep their
// draws, are off here so that every draft token counts.)
TEST(Recipe, DraftTokensShareTheirRequestsIndices) {
  for (double fraction : {0.0, 0.5, 0.9}) {
    DecodeRecipe r;
    r.b = 6;
    r.s_q = 4;
    r.topk = 256;
    r.extra_cache = true;
    r.extra_topk = 128;
    r.shared_indices = fraction;
    r.empty_queries = false;
    DecodeCase c;
    ASSERT_TRUE(make_decode_case(r, &c).ok());
    DecodeRecipe independent = r;
    independent.shared_indices = 0.0;
    DecodeCase base;
    ASSERT_TRUE(make_decode_case(independent, &base).ok());
    const auto check = [&](const TensorView& view, const std::vector<int32_t>& got,
                           const std::vector<int32_t>& drawn, int64_t topk, const char* list) {
      int64_t same = 0, total = 0;
      for (int64_t bi = 0; bi < r.b; ++bi) {
        for (int64_t si = 0; si < r.s_q; ++si) {
          const int64_t row = bi * view.strides[0] + si * view.strides[1];
          const int64_t first = bi * view.strides[0];
          for (int64_t k = 0; k < topk; ++k) {
            const int32_t v = got[row + k];
            if (si == 0) {
              ASSERT_EQ(v, drawn[row + k]) << list << " b " << bi << " s " << si << " k " << k;
              continue;
            }
            ASSERT_TRUE(v == drawn[row + k] || v == got[first + k]) << list;
            same += v == got[first + k];
            ++total;
          }
        }
      }
      const double rate = static_cast<double>(same) / static_cast<double>(total);
      // Chance equality of independent draws is ~1/num_slots (plus the invalid-value mixture).
      EXPECT_NEAR(rate, fraction, 0.05) << list << " shared_indices " << fraction;
    };
    check(c.indices_view, c.indices, base.indices, r.topk, "main");
    check(*c.extra_indices_view, c.extra_indices, base.extra_indices, r.extra_topk, "extra");
  }
}

// distinct_indices: every token's list holds topk distinct valid slots (FlashMLA's prefill
// benchmark's lists), also where topk is most of s_kv; -1 past s_kv where topk exceeds it.
TEST(Recipe, PrefillDistinctIndices) {
  for (const auto& [topk, s_kv] : {std::pair{64, 4096}, std::pair{900, 1000}, std::pair{40, 25}}) {
    PrefillRecipe r;
    r.s_q = 9;
    r.h_q = 2;
    r.topk = topk;
    r.s_kv = s_kv;
    r.invalid_indices = r.empty_queries = r.topk_length = false;
    r.distinct_indices = true;
    PrefillCase c;
    ASSERT_TRUE(make_prefill_case(r, &c).ok());
    const int64_t stride = c.indices_view.strides[0];
    for (int64_t i = 0; i < r.s_q; ++i) {
      const int32_t* list = &c.indices[i * stride];
      const int64_t valid = std::min<int64_t>(topk, s_kv);
      std::set<int32_t> seen(list, list + valid);
      EXPECT_EQ(static_cast<int64_t>(seen.size()), valid) << "token " << i;
      EXPECT_GE(*seen.begin(), 0);
      EXPECT_LT(*seen.rbegin(), s_kv);
      for (int64_t k = valid; k < topk; ++k) EXPECT_EQ(list[k], -1);
    }
  }
  PrefillRecipe mixed;  // distinct lists have no room for the invalid-value mixture
  mixed.distinct_indices = true;
  PrefillCase c;
  EXPECT_FALSE(make_prefill_case(mixed, &c).ok());
}

// request_tokens: the lists of FlashMLA's decode benchmark. Each request owns pages no other
// request uses; a token's valid slots are distinct positions below its request's length, on
// its request's pages; the lengths spread around request_tokens (some requests shorter than
// topk, whose lists end in -1); the cache is b x the longest request's pages, as
// decode_cache_blocks says before the case is made.
TEST(Recipe, DecodeRequestsOnTheirOwnPages) {
  DecodeRecipe r;
  r.b = 24;
  r.s_q = 2;
  r.topk = 50;
  r.page_block_size = 8;
  r.request_tokens = 70;
  r.extra_cache = true;
  r.extra_topk = 20;
  r.extra_page_block_size = 4;
  r.extra_request_tokens = 30;
  r.invalid_indices = r.empty_queries = r.topk_length = r.extra_topk_length = false;
  const DecodeCacheBlocks blocks = decode_cache_blocks(r);
  DecodeCase c;
  ASSERT_TRUE(make_decode_case(r, &c).ok());
  EXPECT_EQ(c.cache_view.num_blocks, blocks.main);
  EXPECT_EQ(c.extra_cache_view->num_blocks, blocks.extra);
  const auto check = [&](const std::vector<int32_t>& indices, const TensorView& view, int64_t topk,
                         int64_t page, int64_t num_blocks, int64_t tokens, const char* list) {
    EXPECT_EQ(num_blocks % r.b, 0) << list;
    std::vector<int64_t> owner(num_blocks, -1);
    int64_t short_lists = 0, longest = 0, shortest = INT64_MAX;
    for (int64_t bi = 0; bi < r.b; ++bi) {
      int64_t request_valid = -1;
      for (int64_t si = 0; si < r.s_q; ++si) {
        const int32_t* row = &indices[bi * view.strides[0] + si * view.strides[1]];
        std::set<int32_t> slots;
        int64_t valid = 0;
        for (int64_t k = 0; k < topk; ++k) {
          if (row[k] < 0) {
            EXPECT_EQ(row[k], -1) << list;
            continue;
          }
          EXPECT_EQ(valid, k) << list << ": -1 only after the valid entries";
          ++valid;
          slots.insert(row[k]);
          const int64_t block = row[k] / page;
          ASSERT_LT(block, num_blocks) << list;
          EXPECT_TRUE(owner[block] == -1 || owner[block] == bi) << list << " page " << block;
          owner[block] = bi;
        }
        EXPECT_EQ(static_cast<int64_t>(slots.size()), valid) << list << " b " << bi;
        if (request_valid >= 0) EXPECT_EQ(valid, request_valid) << list << ": one length";
        request_valid = valid;
      }
      short_lists += request_valid < topk;
      // A short request's list is all of its positions: its length.
      if (request_valid < topk) {
        longest = std::max(longest, request_valid);
        shortest = std::min(shortest, request_valid);
      }
    }
    EXPECT_GT(short_lists, 0) << list << ": N(" << tokens << ", " << tokens / 2
                              << ") puts some requests below topk " << topk;
    EXPECT_LT(short_lists, r.b) << list;
    EXPECT_LT(shortest, longest) << list << ": lengths spread";
  };
  check(c.indices, c.indices_view, r.topk, r.page_block_size, blocks.main, r.request_tokens,
        "main");
  check(c.extra_indices, *c.extra_indices_view, r.extra_topk, r.extra_page_block_size, blocks.extra,
        r.extra_request_tokens, "extra");
  DecodeRecipe given = r;  // the cache's size is the requests'
  given.num_blocks = 100;
  EXPECT_FALSE(make_decode_case(given, &c).ok());
  DecodeRecipe mixed = r;
  mixed.invalid_indices = true;
  EXPECT_FALSE(make_decode_case(mixed, &c).ok());
}

}  // namespace
}  // namespace sparse_mla::verify
