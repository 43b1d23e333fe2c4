// How the portable CUDA back end launches a decode call: which split-kernel tile runs it (head
// rows x keys per block), whether the two head groups of 65..128 heads run as 2-CTA clusters,
// whether the 16-row tile runs the warp-specialised kernel, and how many parts the schedule cuts
// the KV work into. Plan and run both ask, with the same problem, so they agree.
//
// Host-only and free of the CUDA runtime, so the CPU test suite tests it
// (tests/cpp/decode_launch_policy_test.cpp): what it needs to know of the device (each tile's
// shared memory, resident CTAs and clusters) comes through DecodeTileSet, which kernel_tables.cpp
// answers from the runtime and the tests answer with numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/runtime/device_limits.h"
#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/sparse_decode.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda {

// Head rows per CTA for h_q heads: 16, 32 or 64 (h_q > 64: ceil(h_q / 64) head groups).
inline int decode_rows_for(int64_t h_q) { return h_q <= 16 ? 16 : (h_q <= 32 ? 32 : 64); }

// Head-group CTAs per part of an unpaired launch (the grid's y): ceil(h_q / rows).
inline int decode_head_groups(int64_t h_q, int rows) {
  return static_cast<int>((h_q + rows - 1) / rows);
}

// One decode tile of the build: a row of the kernel table (src/cuda/instantiations/kernels.py).
struct DecodeTile {
  const char* name;    // "portable_sparse_decode_v4fp8_d512_h16_k32"
  const char* family;  // "portable_sparse_decode"
  KvCacheFormat format;
  int d_qk;
  int rows;               // head rows per CTA
  int block_keys;         // KV slots per block
  bool warp_specialized;  // producer warps gather and dequantise
};

// The decode tiles a build has, and what the current device says about each.
class DecodeTileSet {
 public:
  virtual size_t size() const = 0;
  virtual const DecodeTile& tile(size_t i) const = 0;
  virtual int smem_bytes(size_t i) const = 0;   // dynamic shared memory of tile i
  virtual int ctas_per_sm(size_t i) const = 0;  // resident CTAs per SM; 0 = the query failed
  // Resident 2-CTA clusters when tile i runs paired; 0 = it cannot (bf16, below sm_90, no sm_90
  // code).
  virtual int pair_clusters(size_t i) const = 0;

 protected:
  ~DecodeTileSet() = default;
};

// The SMLA_* settings that steer the choice (cuda/knobs.h); nullopt = the default.
struct DecodeKnobs {
  std::optional<int> block_keys;        // SMLA_DECODE_BLOCK_KEYS: 32 | 64
  std::optional<int> pair_head_groups;  // SMLA_DECODE_PAIR_HEAD_GROUPS: 0 | 1
  std::optional<int> warp_specialized;  // SMLA_DECODE_WARP_SPECIALIZED: 0 | 1
  std::optional<int> num_parts;         // SMLA_DECODE_NUM_PARTS: parts of an unpaired launch
};

// Whether any tile of `format` at `d_qk` is in the set.
bool has_decode_tiles(const DecodeTileSet& tiles, KvCacheFormat format, int64_t d_qk);

// The tile for (format, d_qk, h_q) on a device with `smem_optin` bytes of shared memory per block
// (cuda/tile_choice.h), as an index into `tiles`, or nullopt with the reason in *why_not. The
// 16-row x 32-key tile of an FP8 cache is the warp-specialised one where that is built, wanted
// and fits.
std::optional<size_t> choose_decode_tile(const DecodeTileSet& tiles, KvCacheFormat format,
                                         int64_t d_qk, int64_t h_q, int smem_optin,
                                         const DecodeKnobs& knobs, std::string* why_not);

// How a decode call launches its tile: parts of the split schedule, and whether the two head
// groups of 65..128 heads run as 2-CTA clusters that share each block's gather and
// dequantisation (quantized caches on sm_90+).
struct DecodeLaunchShape {
  size_t tile = 0;  // index into the DecodeTileSet
  int head_groups = 1;
  int num_parts = 1;
  int64_t min_units = 0;  // the schedule's floor of units per part (planning/decode_part_count.h)
  int working_parts = 1;  // parts that hold blocks when every list is full
  int ctas_per_sm = 0;    // unpaired launches
  int clusters = 0;       // paired launches: resident 2-CTA clusters on the device; 0 = unpaired
};

// The launch of `problem` starting from choose_decode_tile's `tile`: a warp-specialised tile
// whose working parts do not fit one wave runs its split-kernel twin instead. kUnsupported when
// the tile cannot be resident on the device.
Status choose_decode_launch(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                            const DecodeTileSet& tiles, const DecodeKnobs& knobs, size_t tile,
                            DecodeLaunchShape* shape);

// Whether every list of the call is full: no topk_length tensor, and none for an extra cache.
// Every query then has the same blocks and the host knows the planner's schedule (the part
// count's whole-query parts, decode_part_count.h; the combine skipped where no query is split,
// kernel_tables.cpp).
bool decode_lists_full(const SparseDecodeProblem& problem);

// Blocks of `block_keys` slots of one query whose main and extra lists are full: the lists' bound,
// which the part count sizes parts for, and every query's blocks where decode_lists_full.
int32_t decode_full_list_blocks(const SparseDecodeProblem& problem, int block_keys);

// The launch of a kernel that runs one CTA of `rows` heads per part and head group on every SM
// (the Hopper decode, sm90a/sparse_decode): head groups of `rows`, and the part-count rule for
// full lists (planning/decode_part_count.h) over sm_count / head groups slots; `tile` unused.
DecodeLaunchShape one_cta_per_sm_decode_shape(const SparseDecodeProblem& problem,
                                              const DeviceLimits& limits, int rows, int block_keys);

// The Hopper decode's tile (sm90a/seesaw/config.cuh: kHeadRows, kBlockKeys): 64 head rows per
// CTA, 64-key blocks, scored in pairs.
inline constexpr int kSm90aDecodeRows = 64;
inline constexpr int kSm90aDecodeBlockKeys = 64;

// Whether the Hopper decode (sm90a/sparse_decode) is the default for a problem it can run, with
// SMLA_DECODE_SM90A unset: when its launch has at least sm90a_decode_min_default_pairs pairs of
// 64-key blocks with full lists (b * s_q queries x head groups x ceil(blocks / 2) pairs). Below
// that a CTA's fixed costs (its Q, the ring's first gathers and conversions, the store) outweigh
// what its pairs gain. Measured on the H200 against the portable kernels in one binary:
//
// - 33..128 heads: one pair per kSm90aDecodeSmsPerPair SMs (66 on the H200). v15,
//   benchmarks/results/sm90a-decode-default-rule-h200-2026-12-04/: from 72 pairs up every row ran
//   0.85-1.01x their time (V4 h128 128 + 1024 slots b 2 s_q 2: 72 pairs, 0.94x; V3.2 h128 b 2
//   s_q 2: 128, 0.89x; V4 h64 128 + 512 b 16 s_q 1: 80, 0.89x; V4 h64 b 32-64: 160-320 pairs,
//   0.98-1.01x), from 64 pairs down 1.03-1.29x (V3.2 h128 b 1 s_q 2: 64, 1.03x; V3.2 h64 b 2
//   s_q 2: 64, 1.08x; V4 h64 b 12 s_q 1: 60, 1.08x; V4 h128 b 1: 18-36, 1.10-1.12x; V3.2 b 1:
//   16-32, 1.24-1.29x).
// - 17..32 heads (half the 64-row tile padded, against the portable 32-row tile):
//   kSm90aDecodePaddedPairsPerSm pairs per SM. v18,
//   benchmarks/results/sm90a-decode-small-heads-h200-2026-12-04/: 32 heads V3.2 topk 2048 b 64
//   s_q 2 (2048 pairs) 0.84x, V4 128 + 512 s_q 1 b 128 (640) 0.88x, b 64 (320) 1.11x, b 12 (60)
//   1.15x, b 1 (5) 1.21x. The padding costs the kernel little (its bound is the in-place
//   conversion of each block, the same at any head count), but the portable 32-row tile it
//   competes with is faster than the 64-row one, so its per-CTA fixed costs need more pairs.
// - 16 heads or fewer: never (kSm90aDecodeMinDefaultHeads). The portable 16-row tile (the
//   warp-specialised one on FP8 caches) does a quarter of the 64-row tile's work per block: the
//   Hopper decode took 1.25-1.36x its time on every 8- and 16-head row of the same call, at up to
//   2048 pairs.
//
// The rule holds for bf16 caches too (no conversion, twice the gathered bytes; 4c4665a,
// benchmarks/results/sm90a-decode-bf16-h200-2026-12-04/, forced against the portable kernels):
// 64 / 80 / 128 pairs 0.97-0.99 / 0.92 / 0.87x their time, 60 and 20 pairs 1.03x, from 640 pairs
// up 0.51-0.88x at 64-128 heads; 32 heads at 2048 / 640 pairs 0.96 / 0.97x, at 320 pairs 1.09x;
// 16 heads 1.03-1.27x.
inline constexpr int64_t kSm90aDecodeSmsPerPair = 2;
inline constexpr int64_t kSm90aDecodePaddedPairsPerSm = 4;
inline constexpr int64_t kSm90aDecodeMinDefaultHeads = 17;

int64_t sm90a_decode_pairs(const SparseDecodeProblem& problem);

// The pairs the rule above asks of a problem's launch on sm_count SMs; nullopt below
// kSm90aDecodeMinDefaultHeads heads (never by default).
std::optional<int64_t> sm90a_decode_min_default_pairs(const SparseDecodeProblem& problem,
                                                      int sm_count);

bool sm90a_decode_by_default(const SparseDecodeProblem& problem, int sm_count);

// The index union of the Hopper decode (planning/index_union.h, docs/kernels/index_union.md): a
// request's s_q draft tokens as one query whose s_q x h_q heads share a 64-row tile, over the
// union of their lists. It fits 2..kMaxUnionTokens tokens whose heads fill at most the tile and
// lists of at most kMaxUnionEntries entries a request (s_q x topk, s_q x extra_topk).
bool index_union_fits(const SparseDecodeProblem& problem);

// The union's call: one query per request (s_q 1) of s_q x h_q heads, whose lists hold
// union_capacity slots with per-request lengths (the unions' counts).
SparseDecodeProblem index_union_problem(const SparseDecodeProblem& problem);

// Whether a problem's decode runs over the union: SMLA_DECODE_INDEX_UNION (`knob`) 1 wherever it
// fits (and the Hopper decode runs: not with SMLA_DECODE_SM90A=0), 0 or unset never. It pays only
// where the tokens' lists share rows (MTP traffic; the random lists of the test recipe share none
// unless asked, --shared_indices).
bool index_union_chosen(const SparseDecodeProblem& problem, std::optional<int> knob);

// Fills what a plan says about the launch: num_sm_parts, workspace_bytes, the typed kernel
// fields (kernel_config, kernel_family, rows_per_cta, ...) and `reason`.
void fill_decode_plan(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                      const DecodeTileSet& tiles, const DecodeKnobs& knobs,
                      const DecodeLaunchShape& shape, DecodePlan* plan);

}  // namespace sparse_mla::cuda
