// The two e4m3x2 -> bf16x2 forms of cuda/device/fp8_dequant.cuh on the device: dequant_e4m3x2
// (fp32 scale, one fp32 rounding then bf16 RN) and dequant_e4m3x2_pow2 (bf16 value times the
// ue8m0 scale as bf16x2, one HMUL2) must give the same bits for every pair of codes and every scale
// byte, NaN halves matching NaN halves (payloads may differ). The pow2 form needs sm_90
// (mul.rn.bf16x2), so the test runs on 9.x devices of builds with sm_90 code only.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "gpu/gpu_test_support.h"

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include "gpu/fp8_dequant_kernels.h"

namespace sparse_mla {
namespace {

std::string hex(uint32_t value, int digits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%0*x", digits, value);
  return text;
}

TEST(Fp8DequantGpu, PowerOfTwoScaleMatchesFp32Path) {
  SMLA_SKIP_WITHOUT_GPU();
  if (!SMLA_TEST_BUILD_HAS_SM90_CODE) {
    GTEST_SKIP() << "this build carries no sm_90 code (SMLA_CUDA_ARCHS has no 9x entry): "
                    "dequant_e4m3x2_pow2 needs mul.rn.bf16x2";
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major != 9) {
    GTEST_SKIP() << "device 0 is sm_" << prop.major << prop.minor
                 << ", not sm_90: dequant_e4m3x2_pow2 runs on sm_90 only";
  }

  test_support::E4m3x2DequantComparison cmp;
  const cudaError_t err = test_support::compare_e4m3x2_dequant_forms(&cmp);
  ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  ASSERT_TRUE(cmp.pow2_compiled) << "SMLA_TEST_BUILD_HAS_SM90_CODE is set, yet the kernel ran "
                                    "code without sm_90 (check the target's CUDA_ARCHITECTURES)";

  // Anchors of the fp32 form at scale 1.0, so that agreement means something: e4m3 0x38 = 1.0
  // (bf16 0x3f80), 0x7e = 448 (0x43e0), 0x80 = -0 (0x8000), 0x01 = 2^-9 (0x3b00), 0x7f = NaN.
  ASSERT_EQ(cmp.unit_scale.size(), 65536u);
  EXPECT_EQ(hex(cmp.unit_scale[0x3838], 8), hex(0x3f803f80u, 8));
  EXPECT_EQ(hex(cmp.unit_scale[0x7e80], 8), hex(0x43e08000u, 8));
  EXPECT_EQ(hex(cmp.unit_scale[0x017f] >> 16, 4), hex(0x3b00u, 4));
  EXPECT_TRUE(test_support::bf16_is_nan(cmp.unit_scale[0x017f] & 0xffffu))
      << hex(cmp.unit_scale[0x017f], 8) << ": e4m3 0x7f is NaN";

  std::string listed;
  for (const test_support::E4m3x2DequantMismatch& m : cmp.recorded) {
    listed += "\n  pair " + hex(m.pair, 4) + " scale byte " + hex(m.scale_byte, 2) +
              ": fp32 path " + hex(m.fp32_path, 8) + ", pow2 path " + hex(m.pow2_path, 8);
  }
  EXPECT_EQ(cmp.mismatches, 0u) << cmp.mismatches << " of 65536 pairs x 256 scale bytes differ ("
                                << cmp.recorded.size() << " listed, bf16x2 words):" << listed;
}

}  // namespace
}  // namespace sparse_mla

#else  // built without CUDA: nothing to launch

TEST(Fp8DequantGpu, PowerOfTwoScaleMatchesFp32Path) { SMLA_SKIP_WITHOUT_GPU(); }

#endif
