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

  int wrong = 0;
  for (int key = 0; key < kKeys; ++key) {
    for (int h = 0; h < heads; ++h) {
      float want = 0.0f;
      for (int d = 0; d < d_qk; ++d) {
        want += bf16_value(k[static_cast<size_t>(key) * d_qk + d]) *
                bf16_value(q[static_cast<size_t>(h) * d_qk + d]);
      }
      const float got = result.scores[static_cast<size_t>(key) * heads + h];
      if (got != want && ++wrong <= 8) {
        ADD_FAILURE() << "S^T[key " << key << "][head " << h << "] = " << got << ", want " << want;
      }
    }
  }
  for (int dim = 0; dim < kDv; ++dim) {
    for (int h = 0; h < heads; ++h) {
      float want = 0.0f;
      for (int key = 0; key < kKeys; ++key) {
        want += bf16_value(k[static_cast<size_t>(key) * d_qk + dim]) *
                bf16_value(pt[static_cast<size_t>(h) * kKeys + key]);
      }
      const float got = result.products[static_cast<size_t>(dim) * heads + h];
      if (got != want && ++wrong <= 16) {
        ADD_FAILURE() << "O^T[dim " << dim << "][head " << h << "] = " << got << ", want " << want;
      }
    }
  }
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
