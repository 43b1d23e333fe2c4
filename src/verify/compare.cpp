// The SPEC §5 comparison rule (compare.h): special-value positions first, then per-element
// abs/rel tolerance, then the whole tensor's cosine difference. Sums run in double so the
// comparator itself adds no error worth measuring.
#include "verify/compare.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sparse_mla/kv_cache_codec.h"

namespace sparse_mla::verify {
namespace {

// What kind of special value x is: 0 finite, 1 NaN, 2 +inf, 3 -inf.
int special_kind(double x) {
  if (std::isnan(x)) return 1;
  if (std::isinf(x)) return x > 0 ? 2 : 3;
  return 0;
}

std::string format_double(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

}  // namespace

CompareResult compare(std::string_view name, std::span<const float> got,
                      std::span<const float> expected, Tolerance tol) {
  CompareResult r;
  std::string prefix(name);
  if (got.size() != expected.size()) {
    r.ok = false;
    r.message = prefix + ": size mismatch, got " + std::to_string(got.size()) +
                " elements, expected " + std::to_string(expected.size());
    return r;
  }
  int64_t special_mismatches = 0, first_special = -1;
  double dot = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], e = expected[i];
    int kg = special_kind(g), ke = special_kind(e);
    bool bad = false;
    if (kg != 0 || ke != 0) {
      if (kg != ke) {
        bad = true;
        ++special_mismatches;
        if (first_special < 0) first_special = static_cast<int64_t>(i);
      }
    } else {
      double abs_err = std::fabs(g - e);
      double rel_err = e != 0 ? abs_err / std::fabs(e) : (abs_err == 0 ? 0.0 : INFINITY);
      if (abs_err > r.max_abs_err) r.max_abs_err = abs_err;
      if (rel_err > r.max_rel_err) r.max_rel_err = rel_err;
      bad = !(abs_err <= tol.abs_tol || rel_err <= tol.rel_tol);
      dot += g * e;
      norm += g * g + e * e;
    }
    if (bad) {
      ++r.mismatches;
      if (r.first_bad < 0) r.first_bad = static_cast<int64_t>(i);
    }
  }
  // Two all-zero (or all-special) tensors are identical: cosine difference 0.
  r.cos_diff = norm > 0 ? 1.0 - 2.0 * dot / norm : 0.0;
  bool cos_bad = tol.cos_tol > 0 && !(r.cos_diff <= tol.cos_tol);
  r.ok = r.mismatches == 0 && !cos_bad;

  std::string msg = prefix + ": ";
  if (r.mismatches > 0) {
    size_t i = static_cast<size_t>(r.first_bad);
    msg += std::to_string(r.mismatches) + " of " + std::to_string(got.size()) + " elements off";
    if (special_mismatches > 0) {
      msg += " (" + std::to_string(special_mismatches) + " with inf/NaN at different positions, " +
             "first at " + std::to_string(first_special) + ")";
    }
    msg += ", first at " + std::to_string(i) + ": got " + format_double(got[i]) + " expected " +
           format_double(expected[i]) + "; ";
  } else {
    msg += "all " + std::to_string(got.size()) + " elements within tolerance; ";
  }
  msg += "max abs err " + format_double(r.max_abs_err) + " (tol " + format_double(tol.abs_tol) +
         "), max rel err " + format_double(r.max_rel_err) + " (tol " + format_double(tol.rel_tol) +
         ")";
  if (tol.cos_tol > 0) {
    msg += ", cos diff " + format_double(r.cos_diff) + " (tol " + format_double(tol.cos_tol) + ")" +
           (cos_bad ? " TOO LARGE" : "");
  }
  r.message = msg;
  return r;
}

CompareResult compare_bf16(std::string_view name, std::span<const uint16_t> got,
                           std::span<const uint16_t> expected, Tolerance tol) {
  std::vector<float> g(got.size()), e(expected.size());
  for (size_t i = 0; i < got.size(); ++i) g[i] = bf16_to_float(got[i]);
  for (size_t i = 0; i < expected.size(); ++i) e[i] = bf16_to_float(expected[i]);
  return compare(name, g, e, tol);
}

}  // namespace sparse_mla::verify
