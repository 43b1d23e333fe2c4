// Test data of SPEC §5, made on the host, shared by the C++ tests, the GPU tests and the
// `sparse-mla check` / `bench` commands. A case owns its host tensors (with padded strides when
// asked) and hands out argument structs of the public API pointing into them.
//
// What a case contains (all optional parts switchable by the recipe):
//   q, kv ~ randn/10 + a per-tensor offset; decode q clamped to +-1;
//   rows that no valid slot references poisoned with NaN (before quantization);
//   invalid indices drawn from {INT_MIN, -123456, -1, s_kv or slot count, 114514, INT_MAX};
//   some queries with all slots invalid; topk_length of 0, 1, topk and in between;
//   attn_sink finite, -inf and +inf across heads; padded (non-contiguous) strides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sparse_mla/sparse_mla.h"

namespace sparse_mla::verify {

struct PrefillRecipe {
  int64_t s_q = 4, s_kv = 256, h_q = 16, d_qk = 576, topk = 64;
  bool attn_sink = true;
  bool topk_length = true;
  bool padded_strides = true;   // q/kv/indices/outputs get row padding
  bool invalid_indices = true;  // mix in every kind of invalid index
  bool empty_queries = true;    // some queries with no valid slot at all
  bool poison_unused_rows = true;
  // Each list's entries distinct slots, as FlashMLA's prefill benchmark draws them (-1 past s_kv
  // where topk > s_kv); needs invalid_indices and empty_queries off. Else slots are drawn with
  // repeats.
  bool distinct_indices = false;
  float sm_scale = 0.0f;  // 0 = d_qk ** -0.5
  uint64_t seed = 1;
};

struct DecodeRecipe {
  int64_t b = 2, s_q = 1, h_q = 16, topk = 64;
  KvCacheFormat format = KvCacheFormat::kV32Fp8;
  KvLayout kv_layout = KvLayout::kDefault;  // the main cache's page layout (kDefault: its own)
  int d_qk = 0;                             // 0 = the format's d_qk (bf16 format: 576)
  int64_t page_block_size = 64;
  int64_t num_blocks = 0;  // 0 = enough for ~2x the indexed slots
  bool topk_length = true;
  bool topk_length_per_token = false;
  bool attn_sink = true;
  bool extra_cache = false;
  std::optional<KvCacheFormat> extra_format;      // nullopt: the main cache's format
  KvLayout extra_kv_layout = KvLayout::kDefault;  // kDefault: the extra format's own layout
  int64_t extra_topk = 64;
  int64_t extra_page_block_size = 2;
  int64_t extra_num_blocks = 0;
  bool extra_topk_length = true;  // only with extra_cache
  bool extra_topk_length_per_token = false;
  bool padded_strides = true;  // q/indices/outputs padded, block stride padded
  bool invalid_indices = true;
  bool empty_queries = true;
  bool poison_unused_rows = true;
  // Draft tokens (MTP verification): each entry of a token s >= 1's index lists (main and extra)
  // is its request's token-0 entry at the same position with this probability, so the s_q
  // tokens of one request share most of their rows, as in real traffic; 0 = independent lists.
  // In [0, 1]; queries drawn empty stay empty. A copied entry may repeat a slot the token already
  // lists (request_tokens' lists then hold repeats), which counts once per occurrence (SPEC §3).
  double shared_indices = 0.0;
  // > 0: the lists of FlashMLA's decode benchmark. Request i's cache holds
  // max(round(N(request_tokens, request_tokens / 2)), s_q) tokens on pages of its own: every
  // request gets the longest length's pages (rounded up to 4 pages), a random share of one pool of
  // b x that many pages (num_blocks must be 0). Each token's list is topk distinct positions of its
  // request in random order (-1 past a shorter request's positions), as slots. Needs
  // invalid_indices and empty_queries off. extra_request_tokens: the same for the extra cache.
  int64_t request_tokens = 0;
  int64_t extra_request_tokens = 0;
  std::optional<float> softmax_scale;
  uint64_t seed = 1;
};

// Host storage of one prefill case plus its outputs. Views stay valid while the case lives and
// is not moved... so it is held by unique_ptr where it travels.
struct PrefillCase {
  PrefillRecipe recipe;
  SparsePrefillProblem problem;
  std::vector<uint16_t> q, kv;  // bf16 bits, padded layout
  std::vector<int32_t> indices, topk_length;
  std::vector<float> attn_sink;
  TensorView q_view, kv_view, indices_view;
  std::optional<TensorView> attn_sink_view, topk_length_view;
  float sm_scale = 0.0f;
  int64_t attended = 0;     // sum of effective topk (for FLOP counts)
  int64_t valid_slots = 0;  // valid (query, slot) pairs

  // Arguments whose outputs are the given host/device views (shapes [s_q,h_q,512], [s_q,h_q]).
  SparsePrefillArgs args(TensorView out, TensorView max_logits, TensorView lse) const;
};

struct DecodeCase {
  DecodeRecipe recipe;
  SparseDecodeProblem problem;
  std::vector<uint16_t> q;                  // bf16 bits, padded layout
  std::vector<uint8_t> cache, extra_cache;  // quantized, padded block stride
  std::vector<int32_t> indices, extra_indices, topk_length, extra_topk_length;
  std::vector<float> attn_sink;
  TensorView q_view, indices_view;
  KvCacheView cache_view;
  std::optional<KvCacheView> extra_cache_view;
  std::optional<TensorView> topk_length_view, attn_sink_view, extra_indices_view,
      extra_topk_length_view;
  std::optional<float> softmax_scale;
  int64_t attended = 0;  // attended slots, main + extra (nominal FLOP count)
  int64_t retrieved_main = 0, retrieved_extra = 0;  // distinct valid slots read

  SparseDecodeArgs args(TensorView out, TensorView lse) const;
};

Status make_prefill_case(const PrefillRecipe& recipe, PrefillCase* out);
Status make_decode_case(const DecodeRecipe& recipe, DecodeCase* out);

// The page blocks of a decode case's caches (extra 0 without one), as make_decode_case sizes
// them, known before it runs: a tool checks that a case fits.
struct DecodeCacheBlocks {
  int64_t main = 0, extra = 0;
};
DecodeCacheBlocks decode_cache_blocks(const DecodeRecipe& recipe);

// A copy of a case's inputs on a CUDA device, same strides; args() points at device memory.
struct DevicePrefillInputs {
  std::vector<Buffer> buffers;
  SparsePrefillArgs args_template;  // outputs left empty
};
struct DeviceDecodeInputs {
  std::vector<Buffer> buffers;
  SparseDecodeArgs args_template;
};
Status upload(const PrefillCase& c, Device device, DevicePrefillInputs* out);
Status upload(const DecodeCase& c, Device device, DeviceDecodeInputs* out);

// Host outputs of the right shapes (contiguous), with views.
struct PrefillOutputs {
  std::vector<uint16_t> out;  // [s_q, h_q, d_v] bf16
  std::vector<float> max_logits, lse;
  TensorView out_view, max_logits_view, lse_view;
};
struct DecodeOutputs {
  std::vector<uint16_t> out;  // [b, s_q, h_q, d_v] bf16
  std::vector<float> lse;
  TensorView out_view, lse_view;
};
void allocate_outputs(const SparsePrefillProblem& p, PrefillOutputs* out);  // filled with NaN
void allocate_outputs(const SparseDecodeProblem& p, DecodeOutputs* out);    // filled with NaN
// The same with padded (non-contiguous) views when `padded`; padding elements are NaN too.
void allocate_outputs(const SparsePrefillProblem& p, PrefillOutputs* out, bool padded);
void allocate_outputs(const SparseDecodeProblem& p, DecodeOutputs* out, bool padded);

}  // namespace sparse_mla::verify
