// Host tests of the CUDA decode launch policy (cuda/decode_launch_policy.h) over a tile set whose
// shared memory, resident CTAs and clusters are numbers given here, not asked of a device: the
// tile choice, the warp-specialised choice and its one-wave fallback, pairing, the part count
// and the knobs that steer each, and what the plan reports.
#include "cuda/decode_launch_policy.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planning/decode_part_count.h"
#include "planning/decode_schedule_builder.h"

namespace sparse_mla::cuda {
namespace {

constexpr int kSm90 = 232448;  // H200 opt-in shared memory per block
constexpr int kH200Sms = 132;

struct FakeTile {
  DecodeTile tile;
  int smem = 0;
  int ctas_per_sm = 0;
  int pair_clusters = 0;
};

class FakeTiles final : public DecodeTileSet {
 public:
  explicit FakeTiles(std::vector<FakeTile> tiles) : tiles_(std::move(tiles)) {}
  size_t size() const override { return tiles_.size(); }
  const DecodeTile& tile(size_t i) const override { return tiles_[i].tile; }
  int smem_bytes(size_t i) const override { return tiles_[i].smem; }
  int ctas_per_sm(size_t i) const override { return tiles_[i].ctas_per_sm; }
  int pair_clusters(size_t i) const override { return tiles_[i].pair_clusters; }

 private:
  std::vector<FakeTile> tiles_;
};

FakeTile split(KvCacheFormat format, int d_qk, int rows, int keys, int smem, int ctas,
               int clusters = 0) {
  return {
      {"split", "portable_sparse_decode", format, d_qk, rows, keys, false}, smem, ctas, clusters};
}

// One format's tiles with an H200's numbers in shape (the register-Q 16 x 32 tile two CTAs per
// SM, the rest one; 64-row tiles pair as 66 clusters where the format is quantized), and the
// warp-specialised 16 x 32 tile of the FP8 formats.
std::vector<FakeTile> format_tiles(KvCacheFormat format, int d_qk, bool with_warp_specialized) {
  const int clusters = format == KvCacheFormat::kBf16 ? 0 : kH200Sms / 2;
  std::vector<FakeTile> tiles = {
      split(format, d_qk, 16, 64, 110000, 1),
      split(format, d_qk, 16, 32, 70000, 2),
      split(format, d_qk, 32, 64, 150000, 1),
      split(format, d_qk, 32, 32, 95000, 1),
      split(format, d_qk, 64, 64, 210000, 1, clusters),
      split(format, d_qk, 64, 32, 140000, 1, clusters),
  };
  if (with_warp_specialized) {
    tiles.push_back({{"ws", "portable_sparse_decode", format, d_qk, 16, 32, true}, 162816, 1, 0});
  }
  return tiles;
}

FakeTiles h200_tiles() {
  std::vector<FakeTile> tiles = format_tiles(KvCacheFormat::kV4Fp8, 512, true);
  for (FakeTile& t : format_tiles(KvCacheFormat::kBf16, 512, false)) tiles.push_back(t);
  return FakeTiles(std::move(tiles));
}

// Knobs with one setting.
DecodeKnobs knob(std::optional<int> DecodeKnobs::*setting, int value) {
  DecodeKnobs knobs;
  knobs.*setting = value;
  return knobs;
}

DeviceLimits h200() { return {9, 0, kH200Sms, kSm90}; }

SparseDecodeProblem problem(KvCacheFormat format, int64_t b, int64_t h_q, int64_t topk = 2048) {
  SparseDecodeProblem p;
  p.b = b;
  p.s_q = 1;
  p.h_q = h_q;
  p.d_qk = 512;
  p.topk = topk;
  p.format = format;
  p.page_block_size = 64;
  p.device = Device::cuda(0);
  return p;
}

// The tile choose_decode_tile picks, as (rows, keys, warp-specialised).
struct Picked {
  int rows = 0, keys = 0;
  bool warp_specialized = false;
  friend bool operator==(const Picked&, const Picked&) = default;
};
std::ostream& operator<<(std::ostream& os, const Picked& p) {
  return os << p.rows << " x " << p.keys << (p.warp_specialized ? " warp-specialised" : "");
}

Picked pick(const DecodeTileSet& tiles, KvCacheFormat format, int64_t h_q, int smem_optin,
            const DecodeKnobs& knobs = {}) {
  std::string why;
  const std::optional<size_t> i =
      choose_decode_tile(tiles, format, 512, h_q, smem_optin, knobs, &why);
  EXPECT_TRUE(i.has_value()) << why;
  if (!i) return {};
  const DecodeTile& t = tiles.tile(*i);
  return {t.rows, t.block_keys, t.warp_specialized};
}

// V4.1 tiles (the V4.1 split kernels): the split kernel's tile choice and its warp-specialised
// 16 x 32 tile where that is built, never paired (even forced, even where the tile set claims
// clusters: the V4.1 kernel has no cluster path).
TEST(DecodeLaunchPolicy, V41TilesNeverPair) {
  std::vector<FakeTile> all = format_tiles(KvCacheFormat::kV41Fp8, 512, true);
  for (FakeTile& t : format_tiles(KvCacheFormat::kV4Fp8, 512, true)) all.push_back(t);
  const FakeTiles tiles(std::move(all));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV41Fp8, 16, kSm90), (Picked{16, 32, true}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV41Fp8, 16, kSm90, knob(&DecodeKnobs::warp_specialized, 0)),
            (Picked{16, 32, false}));
  const FakeTiles split_only(format_tiles(KvCacheFormat::kV41Fp8, 512, false));
  EXPECT_EQ(pick(split_only, KvCacheFormat::kV41Fp8, 16, kSm90), (Picked{16, 32, false}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV41Fp8, 64, kSm90), (Picked{64, 64, false}));
  for (const DecodeKnobs& knobs : {DecodeKnobs{}, knob(&DecodeKnobs::pair_head_groups, 1)}) {
    const SparseDecodeProblem p = problem(KvCacheFormat::kV41Fp8, 64, 128, 512);
    std::string why;
    const std::optional<size_t> i =
        choose_decode_tile(tiles, p.format, 512, p.h_q, kSm90, knobs, &why);
    ASSERT_TRUE(i.has_value()) << why;
    EXPECT_EQ(tiles.tile(*i).format, KvCacheFormat::kV41Fp8);
    DecodeLaunchShape shape;
    ASSERT_TRUE(choose_decode_launch(p, h200(), tiles, knobs, *i, &shape).ok());
    EXPECT_EQ(shape.clusters, 0);
    EXPECT_EQ(shape.head_groups, 2);
  }
  // The v4_fp8 tiles of the same set still pair and run producers.
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 16, kSm90), (Picked{16, 32, true}));
}

TEST(DecodeLaunchPolicy, RowsAndHeadGroups) {
  EXPECT_EQ(decode_rows_for(1), 16);
  EXPECT_EQ(decode_rows_for(16), 16);
  EXPECT_EQ(decode_rows_for(17), 32);
  EXPECT_EQ(decode_rows_for(33), 64);
  EXPECT_EQ(decode_rows_for(128), 64);
  EXPECT_EQ(decode_head_groups(128, 64), 2);
  EXPECT_EQ(decode_head_groups(65, 64), 2);
  EXPECT_EQ(decode_head_groups(128, 16), 8);
}

// The Hopper decode's default (sm90a_decode_by_default): b * s_q queries x head groups x pairs of
// 64-key blocks with full lists, at least one pair per two SMs (66 on the H200's 132). V3.2 h128
// topk 2048 (16 pairs per query and head group) runs it at b 2 s_q 2 (128 pairs), not at b 1
// (64); V4 h64 128 + 512 slots (5 pairs per query) at b 16 s_q 1 (80), not at b 12 (60).
TEST(DecodeLaunchPolicy, HopperDecodeDefault) {
  SparseDecodeProblem v32 = problem(KvCacheFormat::kV32Fp8, 64, 128, 2048);
  v32.s_q = 2;
  EXPECT_EQ(sm90a_decode_pairs(v32), 64 * 2 * 2 * 16);
  EXPECT_TRUE(sm90a_decode_by_default(v32, kH200Sms));
  v32.b = 2;
  EXPECT_EQ(sm90a_decode_pairs(v32), 128);
  EXPECT_TRUE(sm90a_decode_by_default(v32, kH200Sms));
  v32.b = 1;
  EXPECT_EQ(sm90a_decode_pairs(v32), 64);
  EXPECT_FALSE(sm90a_decode_by_default(v32, kH200Sms));

  SparseDecodeProblem v4 = problem(KvCacheFormat::kV4Fp8, 16, 64, 128);
  v4.has_extra = true;
  v4.extra_topk = 512;
  EXPECT_EQ(sm90a_decode_pairs(v4), 80);  // 2 + 8 blocks: 5 pairs per query
  EXPECT_TRUE(sm90a_decode_by_default(v4, kH200Sms));
  v4.b = 12;
  EXPECT_FALSE(sm90a_decode_by_default(v4, kH200Sms));
  // An odd block count rounds up to whole pairs: 128 + 576 slots = 2 + 9 blocks, 6 pairs.
  v4.extra_topk = 576;
  EXPECT_EQ(sm90a_decode_pairs(v4), 12 * 6);
  // The threshold is one pair per two SMs exactly (72 pairs: 144 SMs or fewer); a smaller GPU
  // needs less work.
  EXPECT_TRUE(sm90a_decode_by_default(v4, 144));
  EXPECT_FALSE(sm90a_decode_by_default(v4, 145));
  // The extra list counts only with has_extra.
  v4.has_extra = false;
  EXPECT_EQ(sm90a_decode_pairs(v4), 12);

  // Heads. 17..32 pad half the 64-row tile and need 4 pairs per SM (528 on the H200): V4 128 +
  // 512 slots at s_q 1 runs it at b 128 (640 pairs), not at b 64 (320; 1.11x the portable time
  // measured). 16 or fewer never, whatever the work; 33 and up one pair per two SMs.
  SparseDecodeProblem shard = problem(KvCacheFormat::kV4Fp8, 128, 32, 128);
  shard.has_extra = true;
  shard.extra_topk = 512;
  EXPECT_EQ(sm90a_decode_pairs(shard), 128 * 5);
  EXPECT_EQ(sm90a_decode_min_default_pairs(shard, kH200Sms), std::optional<int64_t>(4 * 132));
  EXPECT_TRUE(sm90a_decode_by_default(shard, kH200Sms));
  shard.h_q = 17;
  EXPECT_TRUE(sm90a_decode_by_default(shard, kH200Sms));
  shard.b = 64;
  EXPECT_FALSE(sm90a_decode_by_default(shard, kH200Sms));
  shard.h_q = 33;
  EXPECT_EQ(sm90a_decode_min_default_pairs(shard, kH200Sms), std::optional<int64_t>(66));
  EXPECT_TRUE(sm90a_decode_by_default(shard, kH200Sms));
  shard.h_q = 16;
  shard.b = 1024;
  EXPECT_EQ(sm90a_decode_min_default_pairs(shard, kH200Sms), std::nullopt);
  EXPECT_FALSE(sm90a_decode_by_default(shard, kH200Sms));
  shard.h_q = 1;
  EXPECT_FALSE(sm90a_decode_by_default(shard, kH200Sms));
}

TEST(DecodeLaunchPolicy, TileChoice) {
  const FakeTiles tiles = h200_tiles();
  // 16 heads of an FP8 cache: the warp-specialised 16 x 32 tile; bf16 has none.
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 16, kSm90), (Picked{16, 32, true}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kBf16, 16, kSm90), (Picked{16, 32, false}));
  // SMLA_DECODE_WARP_SPECIALIZED=0: the split kernel's register-Q tile.
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 8, kSm90, knob(&DecodeKnobs::warp_specialized, 0)),
            (Picked{16, 32, false}));
  // Where the producers' rings do not fit, the split tile (an sm_89's 99 KiB).
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 16, 101376), (Picked{16, 32, false}));
  // Larger tiles prefer 64 keys; where those do not fit, 32, then fewer rows.
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 32, kSm90), (Picked{32, 64, false}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 128, kSm90), (Picked{64, 64, false}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 128, 166912), (Picked{64, 32, false}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 128, 101376), (Picked{32, 32, false}));
  // SMLA_DECODE_BLOCK_KEYS forces the key count where it fits.
  EXPECT_EQ(pick(tiles, KvCacheFormat::kV4Fp8, 128, kSm90, knob(&DecodeKnobs::block_keys, 32)),
            (Picked{64, 32, false}));
  EXPECT_EQ(pick(tiles, KvCacheFormat::kBf16, 16, kSm90, knob(&DecodeKnobs::block_keys, 64)),
            (Picked{16, 64, false}));
}

TEST(DecodeLaunchPolicy, MissingTiles) {
  const FakeTiles tiles = h200_tiles();
  EXPECT_TRUE(has_decode_tiles(tiles, KvCacheFormat::kV4Fp8, 512));
  EXPECT_FALSE(has_decode_tiles(tiles, KvCacheFormat::kV32Fp8, 576));
  EXPECT_FALSE(has_decode_tiles(tiles, KvCacheFormat::kBf16, 576));
  std::string why;
  EXPECT_FALSE(choose_decode_tile(tiles, KvCacheFormat::kV32Fp8, 576, 16, kSm90, {}, &why));
  EXPECT_EQ(why, "no instantiation for this shape");
  // A build of the 16-row tiles only runs 128 heads as 8 head groups of 16 rows.
  const FakeTiles only16({split(KvCacheFormat::kV4Fp8, 512, 16, 64, 110000, 1),
                          split(KvCacheFormat::kV4Fp8, 512, 16, 32, 70000, 2)});
  EXPECT_EQ(pick(only16, KvCacheFormat::kV4Fp8, 128, kSm90), (Picked{16, 64, false}));
  // Nothing fits: the smallest tile's need.
  EXPECT_FALSE(choose_decode_tile(only16, KvCacheFormat::kV4Fp8, 512, 16, 50000, {}, &why));
  EXPECT_NE(why.find("needs 70000 bytes"), std::string::npos) << why;
}

// Launch shape of the tile choose_decode_tile picks.
DecodeLaunchShape launch(const DecodeTileSet& tiles, const SparseDecodeProblem& p,
                         const DecodeKnobs& knobs = {}, const DeviceLimits& limits = h200()) {
  std::string why;
  const std::optional<size_t> tile =
      choose_decode_tile(tiles, p.format, p.d_qk, p.h_q, limits.smem_optin, knobs, &why);
  EXPECT_TRUE(tile.has_value()) << why;
  DecodeLaunchShape shape;
  const Status s = choose_decode_launch(p, limits, tiles, knobs, tile.value_or(0), &shape);
  EXPECT_TRUE(s.ok()) << s.message();
  return shape;
}

TEST(DecodeLaunchPolicy, PairedHeadGroups) {
  const FakeTiles tiles = h200_tiles();
  const SparseDecodeProblem v4 = problem(KvCacheFormat::kV4Fp8, 64, 128);
  DecodeLaunchShape shape = launch(tiles, v4);
  EXPECT_EQ(tiles.tile(shape.tile).rows, 64);
  EXPECT_EQ(shape.head_groups, 2);
  EXPECT_EQ(shape.clusters, kH200Sms / 2);
  EXPECT_EQ(shape.ctas_per_sm, 0);
  // The part count follows the lists' bound over the clusters.
  const planning::DecodePartCount count =
      planning::choose_decode_part_count(64, planning::query_blocks(2048, 0, 64), kH200Sms / 2);
  EXPECT_EQ(shape.num_parts, count.num_parts);
  EXPECT_EQ(shape.min_units, count.min_units);
  // SMLA_DECODE_PAIR_HEAD_GROUPS=0, a bf16 cache, or one head group: unpaired.
  EXPECT_EQ(launch(tiles, v4, knob(&DecodeKnobs::pair_head_groups, 0)).clusters, 0);
  EXPECT_EQ(launch(tiles, problem(KvCacheFormat::kBf16, 64, 128)).clusters, 0);
  EXPECT_EQ(launch(tiles, problem(KvCacheFormat::kV4Fp8, 64, 64)).clusters, 0);
  // =1 pairs bf16 where its tile can (here it cannot: 0 clusters).
  EXPECT_EQ(
      launch(tiles, problem(KvCacheFormat::kBf16, 64, 128), knob(&DecodeKnobs::pair_head_groups, 1))
          .clusters,
      0);
  // 2 head groups of 32 rows (a 99 KiB device, 64 heads) do not pair.
  DeviceLimits small = h200();
  small.smem_optin = 101376;
  shape = launch(tiles, problem(KvCacheFormat::kV4Fp8, 64, 64), {}, small);
  EXPECT_EQ(tiles.tile(shape.tile).rows, 32);
  EXPECT_EQ(shape.head_groups, 2);
  EXPECT_EQ(shape.clusters, 0);
}

TEST(DecodeLaunchPolicy, PartCount) {
  const FakeTiles tiles = h200_tiles();
  // One CTA per SM (32 rows x 64 keys): the part-count rule over 132 slots.
  const SparseDecodeProblem p = problem(KvCacheFormat::kV4Fp8, 64, 32, 640);
  DecodeLaunchShape shape = launch(tiles, p);
  const planning::DecodePartCount count =
      planning::choose_decode_part_count(64, planning::query_blocks(640, 0, 64), kH200Sms);
  ASSERT_GT(count.min_units, 0) << "the rule keeps the plain count here; pick another shape";
  EXPECT_EQ(shape.ctas_per_sm, 1);
  EXPECT_EQ(shape.num_parts, count.num_parts);
  EXPECT_EQ(shape.min_units, count.min_units);
  EXPECT_EQ(shape.working_parts, count.working_parts);
  // SMLA_DECODE_NUM_PARTS replaces an unpaired launch's count and drops the floor ...
  shape = launch(tiles, p, knob(&DecodeKnobs::num_parts, 7));
  EXPECT_EQ(shape.num_parts, 7);
  EXPECT_EQ(shape.min_units, 0);
  EXPECT_EQ(shape.working_parts, 7);
  // ... but not a paired one's.
  shape = launch(tiles, problem(KvCacheFormat::kV4Fp8, 64, 128), knob(&DecodeKnobs::num_parts, 7));
  EXPECT_GT(shape.clusters, 0);
  EXPECT_NE(shape.num_parts, 7);
  // Three CTAs per SM: the plain count, one part per resident slot and head group.
  const FakeTiles three({split(KvCacheFormat::kV4Fp8, 512, 32, 64, 70000, 3)});
  shape = launch(three, problem(KvCacheFormat::kV4Fp8, 64, 64, 640));
  EXPECT_EQ(shape.head_groups, 2);
  EXPECT_EQ(shape.num_parts, kH200Sms * 3 / 2);
  EXPECT_EQ(shape.min_units, 0);
  EXPECT_EQ(shape.working_parts, shape.num_parts);
}

TEST(DecodeLaunchPolicy, WarpSpecializedRunsInOneWave) {
  const FakeTiles tiles = h200_tiles();
  // A few queries: the working parts fit the 132 SMs, so the producers run.
  DecodeLaunchShape shape = launch(tiles, problem(KvCacheFormat::kV4Fp8, 12, 16));
  EXPECT_TRUE(tiles.tile(shape.tile).warp_specialized);
  EXPECT_LE(shape.working_parts * shape.head_groups, kH200Sms * shape.ctas_per_sm);
  // Many short queries: the warp-specialised launch would need more than one wave of its one
  // CTA per SM, so the split kernel's twin (two CTAs per SM) runs, with its own part count.
  // (V4 b = 64: 320 parts of >= 5 units, 256 of them working.)
  const SparseDecodeProblem many = problem(KvCacheFormat::kV4Fp8, 64, 16, 640);
  const planning::DecodePartCount ws_count =
      planning::choose_decode_part_count(64, planning::query_blocks(640, 0, 32), kH200Sms);
  ASSERT_GT(ws_count.working_parts, kH200Sms) << "pick a shape of more than one wave";
  shape = launch(tiles, many);
  const DecodeTile& ran = tiles.tile(shape.tile);
  EXPECT_FALSE(ran.warp_specialized);
  EXPECT_EQ(ran.rows, 16);
  EXPECT_EQ(ran.block_keys, 32);
  EXPECT_EQ(shape.ctas_per_sm, 2);
  const planning::DecodePartCount split_count =
      planning::choose_decode_part_count(64, planning::query_blocks(640, 0, 32), 2 * kH200Sms);
  EXPECT_EQ(shape.num_parts, split_count.num_parts);
  EXPECT_EQ(shape.min_units, split_count.min_units);
}

TEST(DecodeLaunchPolicy, TileThatCannotBeResident) {
  const FakeTiles tiles({split(KvCacheFormat::kV4Fp8, 512, 64, 64, 70000, 0)});
  DecodeLaunchShape shape;
  const Status s =
      choose_decode_launch(problem(KvCacheFormat::kV4Fp8, 4, 64), h200(), tiles, {}, 0, &shape);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("the 64-row, 64-key decode kernel cannot be resident on device 0"),
            std::string::npos)
      << s.message();
}

TEST(DecodeLaunchPolicy, PlanFields) {
  const FakeTiles tiles = h200_tiles();
  const SparseDecodeProblem p = problem(KvCacheFormat::kV4Fp8, 12, 16);
  const DecodeLaunchShape shape = launch(tiles, p);
  DecodePlan plan;
  fill_decode_plan(p, h200(), tiles, {}, shape, &plan);
  EXPECT_EQ(plan.kernel_config, "ws");
  EXPECT_EQ(plan.kernel_family, "portable_sparse_decode");
  EXPECT_EQ(plan.rows_per_cta, 16);
  EXPECT_EQ(plan.keys_per_block, 32);
  EXPECT_EQ(plan.head_groups, 1);
  EXPECT_TRUE(plan.warp_specialized);
  EXPECT_FALSE(plan.paired_head_groups);
  EXPECT_EQ(plan.num_sm_parts, shape.num_parts);
  EXPECT_EQ(plan.min_units_per_part, shape.min_units);
  EXPECT_GT(plan.workspace_bytes, 0u);
  EXPECT_NE(plan.reason.find("of 16 rows x 32-key blocks (8 producer warps)"), std::string::npos)
      << plan.reason;

  const SparseDecodeProblem paired = problem(KvCacheFormat::kV4Fp8, 64, 128);
  fill_decode_plan(paired, h200(), tiles, {}, launch(tiles, paired), &plan);
  EXPECT_EQ(plan.rows_per_cta, 64);
  EXPECT_EQ(plan.head_groups, 2);
  EXPECT_TRUE(plan.paired_head_groups);
  EXPECT_FALSE(plan.warp_specialized);
  EXPECT_NE(plan.reason.find("resident 2-CTA clusters"), std::string::npos) << plan.reason;

  // A forced key count that does not fit says so.
  DeviceLimits a100 = h200();
  a100.smem_optin = 166912;
  const DecodeKnobs keys64 = knob(&DecodeKnobs::block_keys, 64);
  const DecodeLaunchShape fallback = launch(tiles, paired, keys64, a100);
  fill_decode_plan(paired, a100, tiles, keys64, fallback, &plan);
  EXPECT_EQ(plan.keys_per_block, 32);
  EXPECT_NE(plan.reason.find("(SMLA_DECODE_BLOCK_KEYS=64 does not fit 166912 B of shared memory)"),
            std::string::npos)
      << plan.reason;
}

}  // namespace
}  // namespace sparse_mla::cuda
