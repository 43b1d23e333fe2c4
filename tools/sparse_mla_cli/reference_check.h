// Verification of a back end's outputs against the reference back end (double accumulation, the
// definition of correct) with SPEC §5's tolerances. For cases too big for the single-threaded
// reference, only a deterministic subset is checked: every `stride`-th query token (prefill), or
// every `stride_b`-th request and of those every `stride_s`-th query token (decode), starting at
// the first; the result says how many queries were checked.
#pragma once

#include <cstdint>
#include <string>

#include "sparse_mla/status.h"
#include "verify/recipe.h"

namespace sparse_mla::cli {

struct VerifyResult {
  bool ok = false;
  int64_t checked = 0;  // queries compared: prefill tokens, decode (request, token) pairs
  int64_t total = 0;
  double out_max_abs_err = 0;
  double out_cos_diff = 0;
  std::string message;  // the first failure, or a one-line summary of the errors
};

// The stride that keeps the reference's nominal FLOPs (total_flop * checked / count) within
// `budget_flop`; 1 (everything) when it fits.
int64_t subset_stride(int64_t count, double total_flop, double budget_flop);

Status verify_prefill(const verify::PrefillCase& c, const verify::PrefillOutputs& got,
                      int64_t stride, VerifyResult* result);
Status verify_decode(const verify::DecodeCase& c, const verify::DecodeOutputs& got,
                     int64_t stride_b, int64_t stride_s, VerifyResult* result);

// Decode strides within `budget_flop`: whole requests while one fits, else one request and a
// subset of its query tokens.
void decode_subset_strides(int64_t b, int64_t s_q, double total_flop, double budget_flop,
                           int64_t* stride_b, int64_t* stride_s);

}  // namespace sparse_mla::cli
