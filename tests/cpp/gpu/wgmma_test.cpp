// The heads-in-N kernels' MMA steps (sm90a/heads_in_n/consumers.cuh) on the device
// against the host: S^T = K Q^T with the keys in M and 16 or 32 heads in N (A = the K tile
// K-major, B = a Q tile of N rows), and O^T = V^T P^T (A = the same tile read MN-major through
// wgmma's transpose flag, B = P^T). Inputs are multiples of 1/8 in [-1, 1], so every partial sum
// is exact in fp32 and the device must match the host bit for bit: a wrong descriptor, swizzle,
// k-step offset or accumulator mapping shows as a mismatch at a named (row, column). Runs on 9.x
// devices of builds with sm_90 code only.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "gpu/wgmma_kernels.h"

namespace sparse_mla {
namespace {

constexpr int kKeys = 64;
constexpr int kDv = 512;

uint16_t bf16_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact: v is a multiple of 1/8 in [-1, 1]
}

float bf16_value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float v;
  std::memcpy(&v, &wide, 4);
  return v;
}

std::vector<uint16_t> eighths(size_t n, std::mt19937* rng) {
  std::uniform_int_distribution<int> pick(-8, 8);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = bf16_bits(static_cast<float>(pick(*rng)) / 8.0f);
  return v;
}

class TransposedWgmma : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(TransposedWgmma, ScoresAndProductsMatchTheHost) {
  SMLA_SKIP_WITHOUT_GPU();
  if (!SMLA_TEST_BUILD_HAS_SM90_CODE) {
    GTEST_SKIP() << "this build carries no sm_90 code (SMLA_CUDA_ARCHS has no 9x entry)";
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9) {
    GTEST_SKIP() << "device 0 is sm_" << prop.major << prop.minor << ": wgmma needs sm_90a";
  }
  const auto [heads, d_qk] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(heads * 1000 + d_qk));
  const std::vector<uint16_t> k = eighths(static_cast<size_t>(kKeys) * d_qk, &rng);
  const std::vector<uint16_t> q = eighths(static_cast<size_t>(heads) * d_qk, &rng);
  const std::vector<uint16_t> pt = eighths(static_cast<size_t>(heads) * kKeys, &rng);

  test_support::TransposedWgmmaResult result;
  const cudaError_t err = test_support::run_transposed_wgmma(heads, d_qk, k, q, pt, &result);
  ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  ASSERT_TRUE(result.ran) << "SMLA_TEST_BUILD_HAS_SM90_CODE is set, yet the kernel ran code "
                             "without sm_90a";
  ASSERT_EQ(result.scores.size(), static_cast<size_t>(kKeys) * heads);
  ASSERT_EQ(result.products.size(), static_cast<size_t>(kDv) * heads);

  // got [rows][heads] against sum over i < inner of a(row, i) * b(head, i), exact; the first 16
  // differences are named.
  int wrong = 0;
  const auto check = [&](const char* what, const char* row_name, int rows, int inner,
                         const std::vector<float>& got, auto&& a, auto&& b) {
    for (int row = 0; row < rows; ++row) {
      for (int h = 0; h < heads; ++h) {
        float want = 0.0f;
        for (int i = 0; i < inner; ++i) want += a(row, i) * b(h, i);
        const float value = got[static_cast<size_t>(row) * heads + h];
        if (value != want && ++wrong <= 16) {
          ADD_FAILURE() << what << "[" << row_name << " " << row << "][head " << h
                        << "] = " << value << ", want " << want;
        }
      }
    }
  };
  const auto at = [](const std::vector<uint16_t>& v, int64_t i) { return bf16_value(v[i]); };
  check(
      "S^T", "key", kKeys, d_qk, result.scores,
      [&](int key, int d) { return at(k, int64_t{key} * d_qk + d); },
      [&](int h, int d) { return at(q, int64_t{h} * d_qk + d); });
  check(
      "O^T", "dim", kDv, kKeys, result.products,
      [&](int dim, int key) { return at(k, int64_t{key} * d_qk + dim); },
      [&](int h, int key) { return at(pt, int64_t{h} * kKeys + key); });
  EXPECT_EQ(wrong, 0) << " elements differ";
}

INSTANTIATE_TEST_SUITE_P(HeadsInN, TransposedWgmma,
                         ::testing::Values(std::pair{16, 576}, std::pair{16, 512},
                                           std::pair{32, 576}, std::pair{32, 512}),
                         [](const auto& info) {
                           return "h" + std::to_string(info.param.first) + "_d" +
                                  std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace sparse_mla

#else  // built without CUDA: nothing to launch

TEST(TransposedWgmma, ScoresAndProductsMatchTheHost) { SMLA_SKIP_WITHOUT_GPU(); }

#endif
