// The SPEC §5 comparator must catch what it exists for: inf/NaN at different positions, one bad
// element among many, and a small drift spread over every element that per-element tolerances
// let through but the cosine difference does not; and it must pass what is within tolerance.
#include "verify/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sparse_mla/sparse_mla.h"

namespace sparse_mla::verify {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> ramp(int n) {  // values of both signs, none zero
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = std::sin(0.37f * i + 0.1f) * 0.5f + (i % 2 ? 0.01f : -0.01f);
  return v;
}

TEST(Compare, IdenticalPasses) {
  std::vector<float> a = ramp(1000);
  CompareResult r = compare("out", a, a, kPrefillOut);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_EQ(r.cos_diff, 0.0);
}

TEST(Compare, WithinToleranceNoisePasses) {
  std::vector<float> a = ramp(1000), b = a;
  for (size_t i = 0; i < b.size(); ++i) b[i] += (i % 3 == 0 ? 1 : -1) * 5e-4f;  // < abs_tol
  CompareResult r = compare("out", b, a, kPrefillOut);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Compare, NaNPositionMismatch) {
  std::vector<float> a = ramp(100), b = a;
  a[10] = kNaN;
  b[11] = kNaN;
  CompareResult r = compare("lse", b, a, kPrefillStats);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.first_bad, 10);
  EXPECT_NE(r.message.find("lse"), std::string::npos);
}

TEST(Compare, MatchingSpecialValuesPass) {
  std::vector<float> a = ramp(100);
  a[3] = kInf;
  a[4] = -kInf;
  a[5] = kNaN;
  CompareResult r = compare("lse", a, a, kPrefillStats);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Compare, InfinitySignAndFiniteMismatch) {
  std::vector<float> a = ramp(50), b = a, c = a;
  a[7] = kInf;
  b[7] = -kInf;  // wrong sign
  c[7] = 1e30f;  // finite where inf is expected
  EXPECT_FALSE(compare("lse", b, a, kPrefillStats).ok);
  EXPECT_FALSE(compare("lse", c, a, kPrefillStats).ok);
  EXPECT_FALSE(compare("lse", a, c, kPrefillStats).ok);
}

TEST(Compare, SingleBadElement) {
  std::vector<float> a = ramp(100000), b = a;
  b[54321] = a[54321] + 0.1f;  // far outside abs and rel tolerance
  CompareResult r = compare("out", b, a, kDecodeOut);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.first_bad, 54321);
  EXPECT_LT(r.cos_diff, kDecodeOut.cos_tol);  // one element barely moves the cosine
}

TEST(Compare, CosineCatchesDriftThatPassesPerElement) {
  // Every element off by 2 %: inside rel_tol 3/128 but a 2e-4 cosine difference.
  std::vector<float> a = ramp(4096), b = a;
  for (size_t i = 0; i < b.size(); ++i) b[i] *= i % 2 ? 1.02f : 0.98f;
  CompareResult r = compare("out", b, a, kPrefillOut);
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_GT(r.cos_diff, kPrefillOut.cos_tol);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("cos diff"), std::string::npos);
}

TEST(Compare, StatsToleranceIsTight) {
  std::vector<float> a = {4.0f, 1e-3f}, b = a;
  b[0] = 4.0f * (1 + 1e-4f);  // rel 1e-4 > 2/65536 and abs 4e-4 > 1e-6
  EXPECT_FALSE(compare("lse", b, a, kPrefillStats).ok);
  b[0] = 4.0f * (1 + 2e-5f);  // rel 2e-5 < 2/65536
  EXPECT_TRUE(compare("lse", b, a, kPrefillStats).ok);
}

TEST(Compare, AllZerosAndSizeMismatch) {
  std::vector<float> z(10, 0.0f), shorter(9, 0.0f);
  EXPECT_TRUE(compare("out", z, z, kPrefillOut).ok);
  CompareResult r = compare("out", shorter, z, kPrefillOut);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("size"), std::string::npos);
}

TEST(Compare, Bf16Inputs) {
  std::vector<uint16_t> a(64), b(64);
  for (int i = 0; i < 64; ++i) a[i] = b[i] = float_to_bf16(0.25f * i - 3);
  EXPECT_TRUE(compare_bf16("out", b, a, kPrefillOut).ok);
  b[5] = float_to_bf16(100.0f);
  EXPECT_FALSE(compare_bf16("out", b, a, kPrefillOut).ok);
}

}  // namespace
}  // namespace sparse_mla::verify
