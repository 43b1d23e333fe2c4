// The CUDA kernel registry (cuda/kernel_registry.h) that the build generated from the kernel
// table: entries name their configuration, the rows not built name the option to rebuild with,
// and a group (family, format, d_qk) is either built or reported missing. Needs the CUDA back end
// compiled, not a device; a build of part of the table (SMLA_KERNELS) checks its absent rows.
#include <gtest/gtest.h>

#include <set>
#include <string>

#if defined(SMLA_WITH_CUDA)
#include "cuda/kernel_registry.h"

namespace sparse_mla::cuda {
namespace {

TEST(KernelRegistry, EntriesNameTheirConfiguration) {
  std::set<std::string> names;
  for (const PrefillEntry& e : portable_prefill_entries()) {
    EXPECT_TRUE(names.insert(e.name).second) << e.name;
    const std::string expected = "portable_sparse_prefill_d" + std::to_string(e.d_qk) + "_h" +
                                 std::to_string(e.rows) + "_k" + std::to_string(e.block_keys);
    EXPECT_EQ(e.name, expected);
    EXPECT_GT(e.smem(), 0) << e.name;
  }
  for (const DecodeEntry& e : portable_decode_entries()) {
    EXPECT_TRUE(names.insert(e.tile.name).second) << e.tile.name;
    EXPECT_EQ(std::string(e.tile.family), "portable_sparse_decode");
    const std::string tile = "_d" + std::to_string(e.tile.d_qk) + "_h" +
                             std::to_string(e.tile.rows) + "_k" + std::to_string(e.tile.block_keys);
    EXPECT_NE(std::string(e.tile.name).find(tile), std::string::npos) << e.tile.name;
    EXPECT_EQ(std::string(e.tile.name).ends_with("_warp_specialized"), e.tile.warp_specialized);
    EXPECT_GT(e.smem(), 0) << e.tile.name;
  }
  for (const AbsentKernel& k : absent_kernels()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name << " is both built and absent";
  }
}

TEST(KernelRegistry, AbsentGroupsNameTheRebuild) {
  for (const AbsentKernel& k : absent_kernels()) {
    const char* why = why_not_built(k.family, k.format, k.d_qk);
    ASSERT_NE(why, nullptr) << k.name;
    EXPECT_NE(std::string(why).find("rebuild with -DSMLA_"), std::string::npos) << why;
  }
  // A built split-kernel tile's group is not reported missing unless part of it is absent.
  for (const DecodeEntry& e : portable_decode_entries()) {
    bool group_partly_absent = false;
    for (const AbsentKernel& k : absent_kernels()) {
      group_partly_absent |= std::string(k.family) == e.tile.family && k.format == e.tile.format &&
                             k.d_qk == e.tile.d_qk;
    }
    if (!group_partly_absent) {
      EXPECT_EQ(why_not_built(e.tile.family, e.tile.format, e.tile.d_qk), nullptr) << e.tile.name;
    }
  }
}

TEST(KernelRegistry, WarpSpecializedTilesHaveTheirTwin) {
  for (const DecodeEntry& ws : portable_decode_entries()) {
    if (!ws.tile.warp_specialized) continue;
    int twins = 0;
    for (const DecodeEntry& e : portable_decode_entries()) {
      twins += !e.tile.warp_specialized && e.tile.format == ws.tile.format &&
               e.tile.d_qk == ws.tile.d_qk && e.tile.rows == ws.tile.rows &&
               e.tile.block_keys == ws.tile.block_keys;
    }
    EXPECT_EQ(twins, 1) << ws.tile.name;
  }
}

}  // namespace
}  // namespace sparse_mla::cuda

#else  // built without CUDA: no registry

TEST(KernelRegistry, NeedsTheCudaBackEnd) { GTEST_SKIP() << "built without CUDA"; }

#endif
