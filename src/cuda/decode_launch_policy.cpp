#include "cuda/decode_launch_policy.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/tile_choice.h"
#include "planning/decode_part_count.h"
#include "planning/decode_schedule_builder.h"
#include "planning/decode_workspace.h"
#include "planning/index_union.h"

namespace sparse_mla::cuda {
namespace {

// The tile of the same format, d_qk and shape as tiles.tile(i) that is (or is not) the
// warp-specialised kernel, or nullopt (bf16 caches, tiles other than 16 x 32, or not built).
std::optional<size_t> tile_twin(const DecodeTileSet& tiles, size_t i, bool warp_specialized) {
  const DecodeTile& e = tiles.tile(i);
  for (size_t j = 0; j < tiles.size(); ++j) {
    const DecodeTile& twin = tiles.tile(j);
    if (twin.warp_specialized == warp_specialized && twin.format == e.format &&
        twin.d_qk == e.d_qk && twin.rows == e.rows && twin.block_keys == e.block_keys) {
      return j;
    }
  }
  return std::nullopt;
}

// Whether the 16-row x 32-key tile of a quantized cache runs the warp-specialised kernel (default)
// or the split kernel's register-Q tile (SMLA_DECODE_WARP_SPECIALIZED=0, for tests and A/B runs).
// A bf16 cache has nothing for producer warps to convert and always runs the split kernel.
bool warp_specialized_wanted(KvCacheFormat format, const DecodeKnobs& knobs) {
  return format != KvCacheFormat::kBf16 && knobs.warp_specialized.value_or(1) == 1;
}

// The V4.1 split kernels (v41_kernel.cuh, v41_warp_specialized_kernel.cuh) have no paired path:
// their tiles run unpaired whatever the knobs say.
bool has_paired_path(KvCacheFormat format) {
  return format != KvCacheFormat::kBf16 && format != KvCacheFormat::kV41Fp8;
}

// Paired head groups by default for every quantized format (bf16 caches have no gather or
// dequantisation to share). Measured on the H200 (one build, one call, 5c22274 + the st.async
// publish): 128 heads, paired / unpaired time v4_fp8 0.87-0.90x, v32_fp8 0.98-0.99x (b = 64..256
// and topk 16384); with the earlier fenced cluster barriers v32_fp8 was 1.02-1.06x.
// SMLA_DECODE_PAIR_HEAD_GROUPS=0 / =1 turns pairing off / on (tests and A/B runs).
bool pairing_wanted(KvCacheFormat format, const DecodeKnobs& knobs) {
  return knobs.pair_head_groups ? *knobs.pair_head_groups == 1 : format != KvCacheFormat::kBf16;
}

// Resident clusters when this problem's launch of tile i is paired, else 0.
int paired_clusters(const SparseDecodeProblem& problem, const DecodeTileSet& tiles, size_t i,
                    const DecodeKnobs& knobs) {
  const DecodeTile& tile = tiles.tile(i);
  // 64-row tiles only (65..128 heads): a device whose shared memory forced 32-row tiles on 33..64
  // heads would also have 2 head groups, a launch no test runs.
  if (tile.rows != 64 || decode_head_groups(problem.h_q, tile.rows) != 2 ||
      !has_paired_path(tile.format) || !pairing_wanted(tile.format, knobs)) {
    return 0;
  }
  return tiles.pair_clusters(i);
}

// planning::choose_decode_part_count, remembered per (queries, bound blocks, slots, full): the
// search takes up to ~40 µs of host time (121 queries of 59 blocks on 132 slots), and the PyTorch
// package plans every layer's call. A map of at most kMaxRemembered shapes, cleared when full.
planning::DecodePartCount part_count_of(int64_t num_queries, int64_t bound_blocks, int32_t slots,
                                        bool lists_full) {
  constexpr size_t kMaxRemembered = 4096;
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int32_t, bool>, planning::DecodePartCount>
      remembered;
  const auto key = std::make_tuple(num_queries, bound_blocks, slots, lists_full);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = remembered.find(key); it != remembered.end()) return it->second;
  }
  const planning::DecodePartCount count =
      planning::choose_decode_part_count(num_queries, bound_blocks, slots, lists_full);
  const std::lock_guard<std::mutex> lock(mutex);
  if (remembered.size() >= kMaxRemembered) remembered.clear();
  remembered.emplace(key, count);
  return count;
}

Status decode_launch_shape(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                           const DecodeTileSet& tiles, const DecodeKnobs& knobs, size_t i,
                           DecodeLaunchShape* shape) {
  const DecodeTile& tile = tiles.tile(i);
  *shape = DecodeLaunchShape{};
  shape->tile = i;
  shape->head_groups = decode_head_groups(problem.h_q, tile.rows);
  shape->clusters = paired_clusters(problem, tiles, i, knobs);
  if (shape->clusters > 0) {
    shape->num_parts = shape->clusters;  // one part = one cluster = both head groups
  } else {
    shape->ctas_per_sm = tiles.ctas_per_sm(i);
    if (shape->ctas_per_sm < 1) {
      return unsupported("plan_sparse_decode: the " + std::to_string(tile.rows) + "-row, " +
                         std::to_string(tile.block_keys) +
                         "-key decode kernel cannot be resident on device " +
                         std::to_string(problem.device.index));
    }
    // The schedule's parts times the head groups fill every resident CTA slot once.
    shape->num_parts = std::max(1, limits.sm_count * shape->ctas_per_sm / shape->head_groups);
  }
  shape->working_parts = shape->num_parts;
  // One or two CTAs (or one cluster) per SM: the slowest part sets the time, so the part count
  // follows the lists' bound (planning/decode_part_count.h). Measured on the H200: V4 b = 64 at
  // 32 / 64 heads (one CTA per SM) 0.75 / 0.78x the plain count's time; at 8 / 16 heads (the
  // register-Q tile, two CTAs per SM) 0.87x, b = 12 0.97-0.98x, b = 1 and 128 within 1 %
  // (benchmarks/results/ab-decode-part-count-two-ctas-2026-11-30/). The 4-warp 16-row tile it
  // replaced ran 3 CTAs per SM, where the plain count measured best
  // (benchmarks/results/exp-decode-num-parts-2026-11-30/).
  if (shape->clusters > 0 || shape->ctas_per_sm <= 2) {
    const int64_t bound_blocks = decode_full_list_blocks(problem, tile.block_keys);
    const planning::DecodePartCount count = part_count_of(
        problem.b * problem.s_q, bound_blocks, shape->num_parts, decode_lists_full(problem));
    shape->num_parts = count.num_parts;
    shape->min_units = count.min_units;
    shape->working_parts = count.working_parts;
  }
  // SMLA_DECODE_NUM_PARTS (cuda/knobs.h) replaces the count of an unpaired launch (and drops the
  // floor), for experiments on the trade between per-piece costs (entry, fp32 partial rows, the
  // combine) and resident CTAs (decode_planner_and_combine.md); ctest runs one odd count.
  if (knobs.num_parts && shape->clusters == 0) {
    shape->num_parts = *knobs.num_parts;
    shape->min_units = 0;
    shape->working_parts = *knobs.num_parts;
  }
  return {};
}

// " (SMLA_DECODE_BLOCK_KEYS=64 does not fit N B of shared memory)" when the forced key count
// lost to the fallback (a device, or an SMLA_DEVICE_SMEM_OPTIN cap, with less shared memory than
// that tile needs), so that the plan says why the knob did not take; "" otherwise.
std::string forced_keys_refused(int block_keys, const DeviceLimits& limits,
                                const DecodeKnobs& knobs) {
  if (!knobs.block_keys || *knobs.block_keys == block_keys) return "";
  return " (SMLA_DECODE_BLOCK_KEYS=" + std::to_string(*knobs.block_keys) + " does not fit " +
         std::to_string(limits.smem_optin) + " B of shared memory)";
}

}  // namespace

bool has_decode_tiles(const DecodeTileSet& tiles, KvCacheFormat format, int64_t d_qk) {
  for (size_t i = 0; i < tiles.size(); ++i) {
    if (tiles.tile(i).format == format && tiles.tile(i).d_qk == d_qk) return true;
  }
  return false;
}

// The decode tile for (format, d_qk, h_q) on a device (cuda/tile_choice.h): 16 head rows prefer
// the compact 32-key tile (the register-Q tile: 2 CTAs of 8 warps per SM instead of one CTA of 4
// on sm_90, so one CTA's per-block gather latency overlaps the other's work; measured on the
// H200 with the 4-warp version: 0.68-0.84x the 64-key time),
// larger tiles the 64-key one (the compact one measured 1.0-1.35x slower there); either falls
// back to the other key count, then to fewer head rows, where the shared memory does not fit.
// SMLA_DECODE_BLOCK_KEYS forces the key count (tests/cpp/CMakeLists.txt runs both).
std::optional<size_t> choose_decode_tile(const DecodeTileSet& tiles, KvCacheFormat format,
                                         int64_t d_qk, int64_t h_q, int smem_optin,
                                         const DecodeKnobs& knobs, std::string* why_not) {
  auto find = [&](int rows, int keys) -> std::optional<size_t> {
    for (size_t i = 0; i < tiles.size(); ++i) {
      const DecodeTile& e = tiles.tile(i);
      if (e.format == format && e.d_qk == d_qk && !e.warp_specialized && e.rows == rows &&
          e.block_keys == keys) {
        return i;
      }
    }
    return std::nullopt;
  };
  const TileSmemFn smem = [&](int rows, int keys) {
    const std::optional<size_t> i = find(rows, keys);
    return i ? tiles.smem_bytes(*i) : 0;
  };
  const int rows = decode_rows_for(h_q);
  const TileChoice choice =
      choose_tile(rows, rows == 16 ? 32 : 64, knobs.block_keys.value_or(0), smem_optin, smem);
  if (choice.rows == 0) {
    *why_not = tile_does_not_fit(rows, smem_optin, smem);
    return std::nullopt;
  }
  const std::optional<size_t> tile = find(choice.rows, choice.block_keys);
  // The 16 x 32 tile runs with producer warps where their kernel's shared memory (raw and bf16
  // rings) fits: v32_fp8 180,224 B, v4_fp8 162,816 B, V4.1 155,648 B, so sm_90 for all, the A100
  // for v4_fp8 and V4.1.
  if (tile && warp_specialized_wanted(format, knobs)) {
    const std::optional<size_t> producers = tile_twin(tiles, *tile, true);
    if (producers && tiles.smem_bytes(*producers) <= smem_optin) return producers;
  }
  return tile;
}

// The warp-specialised 16-row kernel (choose_decode_tile) runs where its working parts (those
// that hold blocks with full lists; the overhead-only ones exit at once) fit one wave of resident
// CTAs (one per SM): a part starts with a serial chain (indices, gather, dequantisation) before
// its first MMA, which the part-count rule's short parts in several waves pay again and again,
// while the split kernel runs two CTAs per SM. Measured on the H200 (16 heads,
// benchmarks/results/exp-decode-warp-specialized-groups-2026-11-30/): one wave, V3.2 b = 64
// 89.8 us (split kernel 99.4), V4 b = 128 38.6 (48.6), b = 12 (150 parts, 126 working) 16.2
// (17.6), b = 1 13.6 (13.7); V4 b = 64 (320 parts of >= 5 units, 256 working) 35.4 (28.8), so
// that one falls back.
Status choose_decode_launch(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                            const DecodeTileSet& tiles, const DecodeKnobs& knobs, size_t tile,
                            DecodeLaunchShape* shape) {
  SMLA_RETURN_IF_ERROR(decode_launch_shape(problem, limits, tiles, knobs, tile, shape));
  if (!tiles.tile(tile).warp_specialized ||
      static_cast<int64_t>(shape->working_parts) * shape->head_groups <=
          static_cast<int64_t>(limits.sm_count) * shape->ctas_per_sm) {
    return {};
  }
  // The kernel table builds every warp-specialised tile with its split-kernel twin
  // (src/cuda/instantiations/generate.py).
  const std::optional<size_t> split = tile_twin(tiles, tile, false);
  if (!split) {
    return unsupported(std::string("plan_sparse_decode: ") + tiles.tile(tile).name +
                       " has no split-kernel twin in this build");
  }
  return decode_launch_shape(problem, limits, tiles, knobs, *split, shape);
}

bool decode_lists_full(const SparseDecodeProblem& problem) {
  return !problem.has_topk_length && !(problem.has_extra && problem.has_extra_topk_length);
}

int32_t decode_full_list_blocks(const SparseDecodeProblem& problem, int block_keys) {
  return planning::query_blocks(problem.topk, problem.has_extra ? problem.extra_topk : 0,
                                block_keys);
}

DecodeLaunchShape one_cta_per_sm_decode_shape(const SparseDecodeProblem& problem,
                                              const DeviceLimits& limits, int rows,
                                              int block_keys) {
  DecodeLaunchShape shape;
  shape.head_groups = decode_head_groups(problem.h_q, rows);
  shape.ctas_per_sm = 1;
  const int slots = std::max(1, limits.sm_count / shape.head_groups);
  const int64_t bound_blocks = decode_full_list_blocks(problem, block_keys);
  const planning::DecodePartCount count =
      part_count_of(problem.b * problem.s_q, bound_blocks, slots, decode_lists_full(problem));
  shape.num_parts = count.num_parts;
  shape.min_units = count.min_units;
  shape.working_parts = count.working_parts;
  return shape;
}

int64_t sm90a_decode_pairs(const SparseDecodeProblem& problem) {
  const int64_t blocks = decode_full_list_blocks(problem, kSm90aDecodeBlockKeys);
  return problem.b * problem.s_q * decode_head_groups(problem.h_q, kSm90aDecodeRows) *
         ((blocks + 1) / 2);
}

std::optional<int64_t> sm90a_decode_min_default_pairs(const SparseDecodeProblem& problem,
                                                      int sm_count) {
  const int64_t sms = std::max(1, sm_count);
  if (problem.h_q < kSm90aDecodeMinDefaultHeads) return std::nullopt;
  if (problem.h_q <= kSm90aDecodeRows / 2) return kSm90aDecodePaddedPairsPerSm * sms;
  return (sms + kSm90aDecodeSmsPerPair - 1) / kSm90aDecodeSmsPerPair;
}

bool sm90a_decode_by_default(const SparseDecodeProblem& problem, int sm_count) {
  const std::optional<int64_t> pairs = sm90a_decode_min_default_pairs(problem, sm_count);
  return pairs && sm90a_decode_pairs(problem) >= *pairs;
}

bool index_union_fits(const SparseDecodeProblem& problem) {
  const int64_t longest = std::max(problem.topk, problem.has_extra ? problem.extra_topk : 0);
  return problem.s_q >= 2 && problem.s_q <= planning::kMaxUnionTokens &&
         problem.s_q * problem.h_q <= kSm90aDecodeRows &&
         problem.s_q * longest <= planning::kMaxUnionEntries;
}

SparseDecodeProblem index_union_problem(const SparseDecodeProblem& problem) {
  SparseDecodeProblem u = problem;
  u.s_q = 1;
  u.h_q = problem.s_q * problem.h_q;
  u.topk = planning::union_capacity(problem.s_q, problem.topk);
  u.has_topk_length = true;
  u.topk_length_per_token = false;
  if (problem.has_extra) {
    u.extra_topk = planning::union_capacity(problem.s_q, problem.extra_topk);
    u.has_extra_topk_length = true;
    u.extra_topk_length_per_token = false;
  }
  return u;
}

bool index_union_chosen(const SparseDecodeProblem& problem, std::optional<int> knob) {
  return knob && *knob == 1 && index_union_fits(problem);
}

void fill_decode_plan(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                      const DecodeTileSet& tiles, const DecodeKnobs& knobs,
                      const DecodeLaunchShape& shape, DecodePlan* plan) {
  const DecodeTile& tile = tiles.tile(shape.tile);
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(problem.b * problem.s_q, shape.num_parts, problem.h_q, 512);
  plan->num_sm_parts = shape.num_parts;
  plan->workspace_bytes = static_cast<size_t>(layout.total_bytes);
  plan->kernel_config = tile.name;
  plan->kernel_family = tile.family;
  plan->rows_per_cta = tile.rows;
  plan->keys_per_block = tile.block_keys;
  plan->head_groups = shape.head_groups;
  plan->warp_specialized = tile.warp_specialized;
  plan->paired_head_groups = shape.clusters > 0;
  plan->min_units_per_part = shape.min_units;
  plan->reason = "portable split-KV: " + std::to_string(shape.num_parts) + " parts x " +
                 std::to_string(shape.head_groups) + " head groups of " +
                 std::to_string(tile.rows) + " rows x " + std::to_string(tile.block_keys) +
                 "-key blocks" + (tile.warp_specialized ? " (8 producer warps)" : "") +
                 forced_keys_refused(tile.block_keys, limits, knobs) +
                 (shape.min_units > 0 ? " (parts of >= " + std::to_string(shape.min_units) +
                                            " units: sized for full lists)"
                                      : "") +
                 " = " +
                 (shape.clusters > 0 ? std::to_string(shape.clusters) +
                                           " resident 2-CTA clusters (the head groups share each "
                                           "block's gather and dequantisation)"
                                     : std::to_string(shape.ctas_per_sm) + " CTA(s) per SM") +
                 " on " + std::to_string(limits.sm_count) + " SMs";
}

}  // namespace sparse_mla::cuda
