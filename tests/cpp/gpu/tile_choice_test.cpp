// The portable kernels' tile choice (cuda/tile_choice.h) for each class of device, with the real
// shared-memory sizes of the instantiations. Needs the CUDA back end compiled, not a device:
// it shows which tile an A100 (163 KiB per block), an L40 / RTX 4090 / A10 (99 KiB) and an H200
// (227 KiB) run, and that every shape has one on all of them.
#include <gtest/gtest.h>

#include <span>
#include <string>

#if defined(SMLA_WITH_CUDA)
#include "cuda/kernel_registry.h"
#include "cuda/tile_choice.h"

namespace sparse_mla::cuda {
namespace {

constexpr int kSm90 = 232448;  // cudaDevAttrMaxSharedMemoryPerBlockOptin of the H100 / H200
constexpr int kSm80 = 166912;  // A100
constexpr int kSm89 = 101376;  // L40, RTX 4090 (sm_89), A10 / RTX 3090 (sm_86)

// The shared memory of this build's split-kernel decode tiles of one format and d_qk (0 for a
// tile that is not built), from the registry (cuda/kernel_registry.h).
template <KvCacheFormat kFormat, int kDqk>
TileSmemFn decode_smem() {
  return [](int rows, int keys) {
    for (const DecodeEntry& e : portable_decode_entries()) {
      if (e.tile.format == kFormat && e.tile.d_qk == kDqk && !e.tile.warp_specialized &&
          e.tile.rows == rows && e.tile.block_keys == keys) {
        return e.smem();
      }
    }
    return 0;
  };
}

template <int kDqk>
TileSmemFn prefill_smem() {
  return [](int rows, int keys) {
    for (const PrefillEntry& e : portable_prefill_entries()) {
      if (e.d_qk == kDqk && e.rows == rows && e.block_keys == keys) return e.smem();
    }
    return 0;
  };
}

// Whether every portable tile of the kernel table is built (SMLA_KERNELS=all): the tests below
// name tiles of every format.
bool all_portable_tiles_built() {
  for (const AbsentKernel& k : absent_kernels()) {
    if (std::string(k.family).rfind("portable_", 0) == 0) return false;
  }
  return true;
}
#define SMLA_SKIP_UNLESS_ALL_KERNELS()                                                  \
  if (!all_portable_tiles_built()) {                                                    \
    GTEST_SKIP() << "this build has part of the kernel table (SMLA_KERNELS); the tile " \
                    "choices are checked in a build of all";                            \
  }

void expect_tile(const TileChoice& got, int rows, int keys, int smem_optin) {
  EXPECT_EQ(got.rows, rows);
  EXPECT_EQ(got.block_keys, keys);
  EXPECT_GT(got.smem_bytes, 0);
  EXPECT_LE(got.smem_bytes, smem_optin);
}

TEST(TileChoice, H200RunsTheNaturalTiles) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  const auto v32 = decode_smem<KvCacheFormat::kV32Fp8, 576>();
  expect_tile(choose_tile(16, 32, 0, kSm90, v32), 16, 32, kSm90);
  expect_tile(choose_tile(32, 64, 0, kSm90, v32), 32, 64, kSm90);
  expect_tile(choose_tile(64, 64, 0, kSm90, v32), 64, 64, kSm90);
  const auto bf16 = decode_smem<KvCacheFormat::kBf16, 576>();
  expect_tile(choose_tile(64, 64, 0, kSm90, bf16), 64, 64, kSm90);
  expect_tile(choose_tile(64, 64, 0, kSm90, prefill_smem<576>()), 64, 64, kSm90);
  expect_tile(choose_tile(16, 64, 0, kSm90, prefill_smem<512>()), 16, 64, kSm90);
}

// The V4.1 split kernel's tiles (raw pitch 528 B: smaller than v4_fp8's) take the tiles v4_fp8
// takes on each device class (docs/kernels/portable_sparse_decode.md).
TEST(TileChoice, V41TilesFollowTheV4Choices) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  const auto v41 = decode_smem<KvCacheFormat::kV41Fp8, 512>();
  const auto v4 = decode_smem<KvCacheFormat::kV4Fp8, 512>();
  for (const int smem_optin : {kSm89, kSm80, kSm90}) {
    for (const int rows : {16, 32, 64}) {
      const TileChoice a = choose_tile(rows, rows == 16 ? 32 : 64, 0, smem_optin, v41);
      const TileChoice b = choose_tile(rows, rows == 16 ? 32 : 64, 0, smem_optin, v4);
      EXPECT_EQ(a.rows, b.rows) << rows << " rows, " << smem_optin << " B";
      EXPECT_EQ(a.block_keys, b.block_keys) << rows << " rows, " << smem_optin << " B";
      EXPECT_LT(a.smem_bytes, b.smem_bytes);
    }
  }
}

TEST(TileChoice, ForcedKeysWinWhereTheyFit) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  const auto v4 = decode_smem<KvCacheFormat::kV4Fp8, 512>();
  expect_tile(choose_tile(64, 64, 32, kSm90, v4), 64, 32, kSm90);
  expect_tile(choose_tile(16, 32, 64, kSm90, v4), 16, 64, kSm90);
  expect_tile(choose_tile(64, 64, 32, kSm90, prefill_smem<576>()), 64, 32, kSm90);
  // Forced 64 keys where they do not fit: the other count, not a failure.
  expect_tile(choose_tile(64, 64, 64, kSm80, prefill_smem<576>()), 64, 32, kSm80);
}

TEST(TileChoice, A100RunsCompactTilesWhereTheStandardOnesDoNotFit) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  expect_tile(choose_tile(64, 64, 0, kSm80, prefill_smem<576>()), 64, 32, kSm80);
  expect_tile(choose_tile(32, 64, 0, kSm80, prefill_smem<576>()), 32, 32, kSm80);
  expect_tile(choose_tile(64, 64, 0, kSm80, decode_smem<KvCacheFormat::kV32Fp8, 576>()), 64, 32,
              kSm80);
  expect_tile(choose_tile(32, 64, 0, kSm80, decode_smem<KvCacheFormat::kV32Fp8, 576>()), 32, 64,
              kSm80);
}

TEST(TileChoice, Sm89FallsBackToFewerHeadRows) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  // 99 KiB: no 64-row tile fits; 128 heads run as 16- or 32-row head groups.
  expect_tile(choose_tile(64, 64, 0, kSm89, decode_smem<KvCacheFormat::kV32Fp8, 576>()), 32, 32,
              kSm89);
  expect_tile(choose_tile(64, 64, 0, kSm89, decode_smem<KvCacheFormat::kBf16, 576>()), 16, 32,
              kSm89);
  expect_tile(choose_tile(64, 64, 0, kSm89, prefill_smem<576>()), 16, 32, kSm89);
  expect_tile(choose_tile(32, 64, 0, kSm89, prefill_smem<512>()), 16, 32, kSm89);
}

// Every kernel shape has a tile on every supported device class.
TEST(TileChoice, EveryShapeRunsOnEveryDeviceClass) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  const TileSmemFn shapes[] = {
      decode_smem<KvCacheFormat::kV32Fp8, 576>(),
      decode_smem<KvCacheFormat::kV4Fp8, 512>(),
      decode_smem<KvCacheFormat::kBf16, 576>(),
      decode_smem<KvCacheFormat::kBf16, 512>(),
      decode_smem<KvCacheFormat::kV41Fp8, 512>(),
      prefill_smem<576>(),
      prefill_smem<512>(),
  };
  for (const int smem_optin : {kSm89, kSm80, kSm90}) {
    for (const TileSmemFn& smem : shapes) {
      for (const int rows : {16, 32, 64}) {
        for (const int keys : {64, 32}) {
          const TileChoice t = choose_tile(rows, keys, 0, smem_optin, smem);
          EXPECT_GT(t.rows, 0) << "rows " << rows << " on a device with " << smem_optin;
          EXPECT_LE(t.rows, rows);
          EXPECT_LE(t.smem_bytes, smem_optin);
        }
      }
    }
  }
}

// choose_tile_entry over an instantiation table: only matching rows compete, and the row found
// is the one choose_tile picked.
struct FakeEntry {
  int format, rows, block_keys;
  int (*smem)();
};
constexpr FakeEntry kFakeTable[] = {
    {0, 16, 64, [] { return 150000; }}, {0, 16, 32, [] { return 80000; }},
    {0, 32, 64, [] { return 190000; }}, {0, 32, 32, [] { return 100000; }},
    {1, 32, 32, [] { return 1000; }},  // another format: never a candidate for format 0
};

TEST(TileChoice, EntryTableChoice) {
  std::string why;
  auto format0 = [](const FakeEntry& e) { return e.format == 0; };
  const FakeEntry* e =
      choose_tile_entry(std::span<const FakeEntry>(kFakeTable), format0, 32, 64, 0, 101376, &why);
  ASSERT_NE(e, nullptr) << why;
  EXPECT_EQ(e->format, 0);
  EXPECT_EQ(e->rows, 32);
  EXPECT_EQ(e->block_keys, 32);
  e = choose_tile_entry(std::span<const FakeEntry>(kFakeTable), format0, 32, 64, 0, 90000, &why);
  ASSERT_NE(e, nullptr) << why;
  EXPECT_EQ(e->rows, 16);
  EXPECT_EQ(e->block_keys, 32);
  e = choose_tile_entry(std::span<const FakeEntry>(kFakeTable), format0, 32, 64, 0, 50000, &why);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(why.find("needs 80000 bytes"), std::string::npos) << why;
}

TEST(TileChoice, NothingFitsNamesTheNeed) {
  SMLA_SKIP_UNLESS_ALL_KERNELS();
  const auto v32 = decode_smem<KvCacheFormat::kV32Fp8, 576>();
  EXPECT_EQ(choose_tile(64, 64, 0, 48 * 1024, v32).rows, 0);
  const std::string why = tile_does_not_fit(64, 48 * 1024, v32);
  EXPECT_NE(why.find("needs " + std::to_string(v32(16, 32)) + " bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("allows 49152"), std::string::npos) << why;
}

}  // namespace
}  // namespace sparse_mla::cuda

#else  // built without CUDA: no tile instantiations to choose from

TEST(TileChoice, NeedsTheCudaBackEnd) { GTEST_SKIP() << "built without CUDA"; }

#endif
