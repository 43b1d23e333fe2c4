// Verification of a back end's outputs against the reference back end (double accumulation, the
// definition of correct) with SPEC §5's tolerances. For cases too big for the single-threaded
// reference, only a deterministic subset is checked: every `stride`-th query token (prefill) or
// request (decode), starting at the first; the result says how many were checked.
#pragma once

#include <cstdint>
#include <string>

#include "sparse_mla/status.h"
#include "verify/recipe.h"

namespace sparse_mla::cli {

struct VerifyResult {
  bool ok = false;
  int64_t checked = 0;  // query tokens (prefill) or requests (decode) compared
  int64_t total = 0;
  const char* unit = "";  // "tokens" or "requests"
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
                     int64_t stride, VerifyResult* result);

}  // namespace sparse_mla::cli
