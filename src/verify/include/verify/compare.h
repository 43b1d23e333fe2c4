// The comparison rule of SPEC §5: +-inf/NaN positions must match exactly; an element passes if
// abs_err <= abs_tol or rel_err <= rel_tol; the tensor's cosine difference
// 1 - 2*sum(a*b)/sum(a*a + b*b) must be within cos_tol (when cos_tol > 0).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace sparse_mla::verify {

struct Tolerance {
  double abs_tol, rel_tol, cos_tol;  // cos_tol 0 = not checked
};

// SPEC §5 table.
inline constexpr Tolerance kPrefillOut{8e-4, 3.0 / 128, 7e-6};
inline constexpr Tolerance kPrefillStats{1e-6, 2.0 / 65536, 0.0};  // max_logits, lse
inline constexpr Tolerance kDecodeOut{1e-3, 2.0 / 128, 5e-6};
inline constexpr Tolerance kDecodeLse{1e-6, 8.0 / 65536, 0.0};

struct CompareResult {
  bool ok = true;
  int64_t mismatches = 0;
  int64_t first_bad = -1;  // flat index of the first failing element
  double max_abs_err = 0, max_rel_err = 0, cos_diff = 0;
  std::string message;  // "out: 3 of 65536 elements off, first at 17: got 0.5 expected 0.25 ..."
};

CompareResult compare(std::string_view name, std::span<const float> got,
                      std::span<const float> expected, Tolerance tol);
// bf16 inputs given as raw bits.
CompareResult compare_bf16(std::string_view name, std::span<const uint16_t> got,
                           std::span<const uint16_t> expected, Tolerance tol);

}  // namespace sparse_mla::verify
