// The blocked attention core of the CPU back end, shared by prefill and decode: one query's heads
// attend to KV rows that the caller gathers (bf16 rows or dequantized cache rows) into a tile of
// kTileRows fp32 rows. Each full tile runs as two small GEMMs with an online softmax between:
//   S[h, 64] = Qs[h, d_qk] . K_tile^T      (Qs = q * sm_scale * log2(e), scores in log2 units)
//   P = exp2(S - m_new), m/l updated, O[h, 512] = O * exp2(m_old - m_new) + P . V_tile
// Micro-kernels are register-blocked (4 heads x 4 vectors of accumulators) over L1-sized chunks.
//
// Use per query:  begin(q...) ; { fill row(); commit_row(); }* ; finish(outputs...)
#pragma once

#include <cstdint>
#include <memory>

namespace sparse_mla::cpu {

// KV rows per tile: 64 rows keep the transposed K chunk (64 dims x 64 rows x 4 B = 16 KB) and
// the V chunk (64 rows x 64 dims) in L1 while every head group streams over them.
inline constexpr int kTileRows = 64;
inline constexpr int kValueDims = 512;

class AttentionTile {
 public:
  // Scratch for up to `max_heads` heads of `d_qk` dims (512 or 576). Throws std::bad_alloc.
  AttentionTile(int d_qk, int max_heads);
  ~AttentionTile();
  AttentionTile(const AttentionTile&) = delete;
  AttentionTile& operator=(const AttentionTile&) = delete;

  // Starts a query: heads 0..num_heads-1 read q + h * q_stride_h ([d_qk] bf16 each).
  void begin(const uint16_t* q, int64_t q_stride_h, int num_heads, float sm_scale);

  // The next KV row to fill: [d_qk] fp32. Call commit_row() once it is written.
  float* row() { return k_rows_ + static_cast<int64_t>(rows_) * d_qk_; }
  void commit_row() {
    if (++rows_ == kTileRows) process_tile();
  }

  // Ends the query and writes head h's results to out + h*out_stride_h ([512] bf16),
  // lse[h*lse_stride_h] and, when max_logits is not null, max_logits[h*max_logits_stride_h].
  // attn_sink (nullable) is [num_heads] fp32 with stride sink_stride.
  void finish(const float* attn_sink, int64_t sink_stride, uint16_t* out, int64_t out_stride_h,
              float* lse, int64_t lse_stride_h, float* max_logits, int64_t max_logits_stride_h);

 private:
  void process_tile();

  int d_qk_, max_heads_;
  int num_heads_ = 0;
  int rows_ = 0;            // rows filled in the current tile
  int64_t total_rows_ = 0;  // rows attended so far by this query
  std::unique_ptr<float, void (*)(float*)> storage_;
  float* q_scaled_;  // [max_heads, d_qk]      q * sm_scale * log2(e)
  float* k_rows_;    // [kTileRows, d_qk]      gathered rows (V = first 512 dims)
  float* k_trans_;   // [d_qk, kTileRows]      the same rows transposed, for the scores
  float* scores_;    // [max_heads, kTileRows] scores, then probabilities
  float* acc_;       // [max_heads, 512]       unnormalised output
  float* max_;       // [max_heads]            running max (log2 units)
  float* sum_;       // [max_heads]            running sum of exp2(s - max)
  float* rescale_;   // [max_heads]            exp2(old max - new max) of the current tile
};

}  // namespace sparse_mla::cpu
