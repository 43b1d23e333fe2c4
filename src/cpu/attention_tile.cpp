// The blocked attention core (attention_tile.h): tile transpose, the two register-blocked
// micro-kernels (scores and P.V), the online softmax between them and the final normalisation.
#include "cpu/attention_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "cpu/fp8.h"
#include "cpu/simd.h"

namespace sparse_mla::cpu {
namespace {

using simd::kLanes;
using simd::VecF;

// Register block: kHeadBlock heads x kVecBlock vectors of accumulators (16 of the 32 AVX-512
// registers, leaving room for the kVecBlock operand vectors and the broadcast).
constexpr int kHeadBlock = 4;
constexpr int kVecBlock = 4;
constexpr int kColBlock = kVecBlock * kLanes;  // 64 columns with AVX-512
// Dims of q / K^T per score pass: 64 x 64 rows x 4 B = 16 KB of K^T stays in L1.
constexpr int kDimChunk = 64;
static_assert(kTileRows % kColBlock == 0 && kValueDims % kColBlock == 0);

constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLn2 = 0.6931471805599453;

// s[r, c] (+)= sum_k q[r, k] * kt[k, c] for R heads and kColBlock columns; q rows ldq apart,
// kt rows kTileRows apart, s rows kTileRows apart.
template <int R>
void score_block(const float* q, int64_t ldq, const float* kt, int k_len, float* s,
                 bool accumulate) {
  VecF acc[R][kVecBlock];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kVecBlock; ++c) {
      acc[r][c] = accumulate ? simd::load(s + r * kTileRows + c * kLanes) : VecF{};
    }
  }
  for (int k = 0; k < k_len; ++k) {
    VecF b[kVecBlock];
    for (int c = 0; c < kVecBlock; ++c) b[c] = simd::load(kt + k * kTileRows + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const VecF a = simd::splat(q[r * ldq + k]);
      for (int c = 0; c < kVecBlock; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kVecBlock; ++c) simd::store(s + r * kTileRows + c * kLanes, acc[r][c]);
  }
}

// o[r, 0:kColBlock] = o[r, :] * rescale[r] + sum_{j < n} p[r, j] * v[j, :] for R heads;
// p rows kTileRows apart, v rows ldv apart, o rows kValueDims apart.
template <int R>
void pv_block(const float* p, const float* rescale, const float* v, int64_t ldv, int n, float* o) {
  VecF acc[R][kVecBlock];
  for (int r = 0; r < R; ++r) {
    const VecF scale = simd::splat(rescale[r]);
    for (int c = 0; c < kVecBlock; ++c) {
      acc[r][c] = simd::load(o + r * kValueDims + c * kLanes) * scale;
    }
  }
  for (int j = 0; j < n; ++j) {
    VecF b[kVecBlock];
    for (int c = 0; c < kVecBlock; ++c) b[c] = simd::load(v + j * ldv + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const VecF a = simd::splat(p[r * kTileRows + j]);
      for (int c = 0; c < kVecBlock; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kVecBlock; ++c) simd::store(o + r * kValueDims + c * kLanes, acc[r][c]);
  }
}

// Runs kernel<R> over heads [0, num_heads) in blocks of kHeadBlock (a 1-3 head remainder last).
template <template <int> class Kernel, typename... Args>
void for_head_blocks(int num_heads, Args... args) {
  int h = 0;
  for (; h + kHeadBlock <= num_heads; h += kHeadBlock) Kernel<kHeadBlock>::run(h, args...);
  switch (num_heads - h) {
    case 3:
      Kernel<3>::run(h, args...);
      break;
    case 2:
      Kernel<2>::run(h, args...);
      break;
    case 1:
      Kernel<1>::run(h, args...);
      break;
    default:
      break;
  }
}

template <int R>
struct ScoreKernel {
  static void run(int h, const float* q, int64_t ldq, const float* kt, int k_len, float* s,
                  bool accumulate, int col) {
    score_block<R>(q + h * ldq, ldq, kt + col, k_len, s + h * kTileRows + col, accumulate);
  }
};

template <int R>
struct PvKernel {
  static void run(int h, const float* p, const float* rescale, const float* v, int64_t ldv, int n,
                  float* o) {
    pv_block<R>(p + h * kTileRows, rescale + h, v, ldv, n, o + h * kValueDims);
  }
};

void free_floats(float* p) { ::operator delete (p, std::align_val_t{64}); }

}  // namespace

AttentionTile::AttentionTile(int d_qk, int max_heads)
    : d_qk_(d_qk), max_heads_(max_heads), storage_(nullptr, free_floats) {
  const int64_t h = max_heads;
  const int64_t floats =
      h * d_qk + int64_t{kTileRows} * d_qk * 2 + h * kTileRows + h * kValueDims + 3 * h;
  storage_.reset(
      static_cast<float*>(::operator new (floats * sizeof(float), std::align_val_t{64})));
  // Zeroed once: rows past the end of a partial tile then hold finite stale values, never
  // uninitialised memory (their scores are masked and their P.V terms skipped).
  std::memset(storage_.get(), 0, floats * sizeof(float));
  float* p = storage_.get();
  q_scaled_ = p, p += h * d_qk;
  k_rows_ = p, p += int64_t{kTileRows} * d_qk;
  k_trans_ = p, p += int64_t{kTileRows} * d_qk;
  scores_ = p, p += h * kTileRows;
  acc_ = p, p += h * kValueDims;
  max_ = p, p += h;
  sum_ = p, p += h;
  rescale_ = p;
}

AttentionTile::~AttentionTile() = default;

void AttentionTile::begin(const uint16_t* q, int64_t q_stride_h, int num_heads, float sm_scale) {
  num_heads_ = num_heads;
  rows_ = 0;
  total_rows_ = 0;
  const float scale = sm_scale * kLog2e;
  for (int h = 0; h < num_heads; ++h) {
    const uint16_t* src = q + h * q_stride_h;
    float* dst = q_scaled_ + int64_t{h} * d_qk_;
    for (int d = 0; d < d_qk_; ++d) dst[d] = bf16_to_float_inline(src[d]) * scale;
    max_[h] = -std::numeric_limits<float>::infinity();
    sum_[h] = 0.0f;
  }
  std::memset(acc_, 0, sizeof(float) * num_heads * kValueDims);
}

void AttentionTile::process_tile() {
  const int n = rows_;
  rows_ = 0;
  if (n == 0) return;
  total_rows_ += n;

  // Columns the scores are computed for: a partial tile (short lists, the last tile) skips the
  // column blocks that hold no row. Columns in [n, cols) are masked below.
  const int cols = (n + kColBlock - 1) / kColBlock * kColBlock;

  // K^T [d_qk, kTileRows], one kLanes x kLanes square at a time, transposed in registers.
  for (int j0 = 0; j0 < cols; j0 += kLanes) {
    for (int d0 = 0; d0 < d_qk_; d0 += kLanes) {
      VecF square[kLanes];
      for (int i = 0; i < kLanes; ++i) square[i] = simd::load(k_rows_ + (j0 + i) * d_qk_ + d0);
      simd::transpose(square);
      for (int i = 0; i < kLanes; ++i) simd::store(k_trans_ + (d0 + i) * kTileRows + j0, square[i]);
    }
  }

  // Scores, one L1-sized chunk of dims at a time.
  for (int col = 0; col < cols; col += kColBlock) {
    for (int k0 = 0; k0 < d_qk_; k0 += kDimChunk) {
      const int k_len = std::min(kDimChunk, d_qk_ - k0);
      for_head_blocks<ScoreKernel>(num_heads_, q_scaled_ + k0, int64_t{d_qk_},
                                   static_cast<const float*>(k_trans_ + k0 * kTileRows), k_len,
                                   scores_, k0 > 0, col);
    }
  }

  // Online softmax: mask rows past n, new max, probabilities in place, running sums.
  const VecF neg_inf = simd::splat(-std::numeric_limits<float>::infinity());
  for (int h = 0; h < num_heads_; ++h) {
    float* s = scores_ + h * kTileRows;
    for (int j = n; j < cols; ++j) s[j] = -std::numeric_limits<float>::infinity();
    VecF vmax = neg_inf;
    for (int j = 0; j < cols; j += kLanes) {
      const VecF x = simd::load(s + j);
      vmax = x > vmax ? x : vmax;
    }
    const float new_max = std::max(max_[h], simd::reduce_max(vmax));
    const VecF shift = simd::splat(new_max);
    VecF vsum = VecF{};
    for (int j = 0; j < cols; j += kLanes) {
      const VecF p = simd::exp2_nonpositive(simd::load(s + j) - shift);
      simd::store(s + j, p);
      vsum += p;
    }
    rescale_[h] = std::exp2(max_[h] - new_max);  // 0 on the first tile (max_ = -inf)
    sum_[h] = sum_[h] * rescale_[h] + simd::reduce_sum(vsum);
    max_[h] = new_max;
  }

  // O = O * rescale + P . V, one L1-sized chunk of value dims at a time.
  for (int col = 0; col < kValueDims; col += kColBlock) {
    for_head_blocks<PvKernel>(
        num_heads_, static_cast<const float*>(scores_), static_cast<const float*>(rescale_),
        static_cast<const float*>(k_rows_ + col), int64_t{d_qk_}, n, acc_ + col);
  }
}

void AttentionTile::finish(const float* attn_sink, int64_t sink_stride, uint16_t* out,
                           int64_t out_stride_h, float* lse, int64_t lse_stride_h,
                           float* max_logits, int64_t max_logits_stride_h) {
  process_tile();
  for (int h = 0; h < num_heads_; ++h) {
    uint16_t* o = out + h * out_stride_h;
    if (total_rows_ == 0) {  // no valid slot: out 0, lse +inf, max_logits -inf
      std::memset(o, 0, sizeof(uint16_t) * kValueDims);
      lse[h * lse_stride_h] = std::numeric_limits<float>::infinity();
      if (max_logits != nullptr) {
        max_logits[h * max_logits_stride_h] = -std::numeric_limits<float>::infinity();
      }
      continue;
    }
    // Natural-log lse from the log2-domain running max and sum.
    const double lse_h = (double(max_[h]) + std::log2(double(sum_[h]))) * kLn2;
    double factor = 1.0 / sum_[h];
    if (attn_sink != nullptr) factor /= 1.0 + std::exp(double(attn_sink[h * sink_stride]) - lse_h);
    const float f = static_cast<float>(factor);
    const float* a = acc_ + int64_t{h} * kValueDims;
    for (int d = 0; d < kValueDims; ++d) o[d] = float_to_bf16_inline(a[d] * f);
    lse[h * lse_stride_h] = static_cast<float>(lse_h);
    if (max_logits != nullptr) {
      max_logits[h * max_logits_stride_h] = static_cast<float>(double(max_[h]) * kLn2);
    }
  }
}

}  // namespace sparse_mla::cpu
