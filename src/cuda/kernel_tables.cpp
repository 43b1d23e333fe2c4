// The CUDA back end's kernel variants (core/kernel_variant.h): the Hopper sparse prefill and FP8
// sparse decode (sm_90 devices, sm_90a code), portable sm_80+ sparse prefill and sparse decode (one
// variant per main cache format), over the tile instantiations this build compiled
// (cuda/kernel_registry.h, generated from src/cuda/instantiations/kernels.py). Each variant checks
// the device (compute capability, opt-in shared memory) in `supports`. Prefill `run` launches the
// tile that cuda/tile_choice.h picks for h_q and the device's shared memory; decode plan and run
// follow the launch policy (cuda/decode_launch_policy.h), and `run` sequences planner (kBuild
// only) -> split kernel -> combine on one stream, without host synchronisation or allocation.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kernel_variant.h"
#include "cuda/combine/launch.h"
#include "cuda/decode_launch_policy.h"
#include "cuda/index_union_call.h"
#include "cuda/kernel_registry.h"
#include "cuda/knobs.h"
#include "cuda/planning/launch.h"
#include "cuda/portable/sparse_prefill/launch.h"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/device_guard.h"
#include "cuda/runtime/device_limits.h"
#include "cuda/tile_choice.h"
#include "planning/decode_schedule_builder.h"
#include "planning/decode_workspace.h"
#include "planning/index_union.h"

namespace sparse_mla::detail {
namespace {

using cuda::DecodeEntry;
using cuda::DeviceLimits;
using cuda::PrefillEntry;

// The device's limits (asked of the runtime once per device: cuda/runtime/device_limits.h).
// SMLA_DEVICE_SMEM_OPTIN (cuda/knobs.h): the tiles of a device with less shared memory, so that
// the A100's and the L40's tile choices run on an H200 (scripts/gpu_check.sh, sm80 mode).
bool device_limits(const Device& device, DeviceLimits* limits, std::string* why_not) {
  if (!cuda::device_limits(device.index, limits, why_not)) return false;
  if (const std::optional<int> cap = cuda::cuda_knobs().device_smem_optin.value) {
    limits->smem_optin = std::min(limits->smem_optin, *cap);
  }
  return true;
}

// The device's limits, if it is sm_80+ (mma.sync bf16, cp.async).
bool device_is_sm80_plus(const Device& device, DeviceLimits* limits, std::string* why_not) {
  if (!device_limits(device, limits, why_not)) return false;
  if (limits->cc_major < 8) {
    *why_not = "needs compute capability 8.0 or newer (mma.sync bf16, cp.async); device " +
               std::to_string(device.index) + " is " + std::to_string(limits->cc_major) + "." +
               std::to_string(limits->cc_minor);
    return false;
  }
  return true;
}

// False, with the message in *why_not, while an SMLA_* knob holds a bad value (cuda/knobs.h):
// every CUDA kernel's supports / plan / run asks this before choosing a tile.
bool knobs_valid(std::string* why_not) {
  if (cuda::cuda_knobs().error.empty()) return true;
  *why_not = cuda::cuda_knobs().error;
  return false;
}

// ---- prefill -------------------------------------------------------------------------------

// d_v and h_q every CUDA prefill kernel takes (d_qk: each kernel's own rows).
bool prefill_shape_supported(const SparsePrefillProblem& problem, std::string* why_not) {
  if (problem.d_v != 512) {
    *why_not = "d_v must be 512, got " + std::to_string(problem.d_v);
    return false;
  }
  if (problem.h_q < 1 || problem.h_q > 128) {
    *why_not = "h_q must be in [1, 128], got " + std::to_string(problem.h_q);
    return false;
  }
  return true;
}

// The prefill tile for (d_qk, h_q) on a device: the standard 64-key tiles where they fit, else
// the compact 32-key ones, else fewer head rows (cuda/tile_choice.h). SMLA_PREFILL_BLOCK_KEYS
// forces the key count (tests/cpp/CMakeLists.txt runs the GPU prefill tests both ways).
const PrefillEntry* prefill_entry(int64_t d_qk, int64_t h_q, const DeviceLimits& limits,
                                  std::string* why_not) {
  if (!knobs_valid(why_not)) return nullptr;
  const std::span<const PrefillEntry> entries = cuda::portable_prefill_entries();
  auto matches = [&](const PrefillEntry& e) { return e.d_qk == d_qk; };
  if (std::none_of(entries.begin(), entries.end(), matches)) {
    if (const char* why =
            cuda::why_not_built("portable_sparse_prefill", KvCacheFormat::kBf16, d_qk)) {
      *why_not = "d_qk " + std::to_string(d_qk) + " prefill kernels are not in this build: " + why;
      return nullptr;
    }
  }
  return cuda::choose_tile_entry(entries, matches, cuda::portable_prefill::prefill_rows_for(h_q),
                                 64, cuda::cuda_knobs().prefill_block_keys.value.value_or(0),
                                 limits.smem_optin, why_not);
}

bool portable_prefill_supports(const SparsePrefillProblem& problem, std::string* why_not) {
  if (!problem.device.is_cuda()) {
    *why_not = "tensors are not on a CUDA device";
    return false;
  }
  if (!prefill_shape_supported(problem, why_not)) return false;
  if (problem.d_qk != 576 && problem.d_qk != 512) {
    *why_not = "d_qk must be 576 or 512, got " + std::to_string(problem.d_qk);
    return false;
  }
  DeviceLimits limits;
  if (!device_is_sm80_plus(problem.device, &limits, why_not)) return false;
  return prefill_entry(problem.d_qk, problem.h_q, limits, why_not) != nullptr;
}

Status portable_prefill_run(const PrefillParams& params, const RunOptions& options) {
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(params.problem.device.index));
  DeviceLimits limits;
  std::string why_not;
  const PrefillEntry* entry = nullptr;
  if (!device_is_sm80_plus(params.problem.device, &limits, &why_not) ||
      (entry = prefill_entry(params.problem.d_qk, params.problem.h_q, limits, &why_not)) ==
          nullptr) {
    return unsupported("sparse_prefill: " + why_not);
  }
  return entry->launch(params, static_cast<cudaStream_t>(options.stream));
}

// ---- Hopper prefill (sm_90a) ----------------------------------------------------------------

// Whether `device` runs this library's sm_90a code (compute capability 9.0: sm_90a SASS runs on
// no other) with `smem` bytes of shared memory per block (SMLA_DEVICE_SMEM_OPTIN can cap it, to
// run a smaller GPU's choices).
bool sm90_device_fits(const Device& device, int smem, std::string* why_not) {
  DeviceLimits limits;
  if (!device_limits(device, &limits, why_not)) return false;
  if (limits.cc_major != 9 || limits.cc_minor != 0) {
    *why_not = "needs an sm_90 device (wgmma, setmaxnreg: sm_90a code); device " +
               std::to_string(device.index) + " is " + std::to_string(limits.cc_major) + "." +
               std::to_string(limits.cc_minor);
    return false;
  }
  if (limits.smem_optin < smem) {
    *why_not = "needs " + std::to_string(smem) +
               " B of shared memory per block, the device allows " +
               std::to_string(limits.smem_optin);
    return false;
  }
  return true;
}

// The Hopper prefill for d_qk if this build has it (the kernel table's sm90a rows are built only
// with 90a in SMLA_CUDA_ARCHS) and it can run here: a compute capability 9.0 device (sm_90a SASS
// runs on no other) with the shared memory it needs (SMLA_DEVICE_SMEM_OPTIN can cap it, to run a
// smaller GPU's choices). SMLA_PREFILL_SM90A=0 (cuda/knobs.h) turns it off: the portable kernel
// then runs on sm_90 too.
const cuda::Sm90aPrefillEntry* sm90a_prefill_entry(const SparsePrefillProblem& problem,
                                                   std::string* why_not) {
  if (!knobs_valid(why_not)) return nullptr;
  if (cuda::cuda_knobs().prefill_sm90a.value.value_or(1) == 0) {
    *why_not = "turned off by SMLA_PREFILL_SM90A=0";
    return nullptr;
  }
  if (!problem.device.is_cuda()) {
    *why_not = "tensors are not on a CUDA device";
    return nullptr;
  }
  if (!prefill_shape_supported(problem, why_not)) return nullptr;
  const cuda::Sm90aPrefillEntry* entry = nullptr;
  for (const cuda::Sm90aPrefillEntry& e : cuda::sm90a_prefill_entries()) {
    if (e.d_qk == problem.d_qk) entry = &e;
  }
  if (entry == nullptr) {
    const char* why =
        cuda::why_not_built("sm90a_sparse_prefill", KvCacheFormat::kBf16, problem.d_qk);
    *why_not = why != nullptr ? std::string(why)
                              : "d_qk must be 576 or 512, got " + std::to_string(problem.d_qk);
    return nullptr;
  }
  return sm90_device_fits(problem.device, entry->smem(), why_not) ? entry : nullptr;
}

bool sm90a_prefill_supports(const SparsePrefillProblem& problem, std::string* why_not) {
  return sm90a_prefill_entry(problem, why_not) != nullptr;
}

Status sm90a_prefill_run(const PrefillParams& params, const RunOptions& options) {
  std::string why_not;
  const cuda::Sm90aPrefillEntry* entry = sm90a_prefill_entry(params.problem, &why_not);
  if (entry == nullptr) return unsupported("sparse_prefill: " + why_not);
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(params.problem.device.index));
  return entry->launch(params, static_cast<cudaStream_t>(options.stream));
}

// ---- decode --------------------------------------------------------------------------------

// The launch policy's knobs (cuda/knobs.h, read once per process).
const cuda::DecodeKnobs& decode_knobs() {
  static const cuda::DecodeKnobs knobs = [] {
    const cuda::CudaKnobs& k = cuda::cuda_knobs();
    return cuda::DecodeKnobs{k.decode_block_keys.value, k.decode_pair_head_groups.value,
                             k.decode_warp_specialized.value, k.decode_num_parts.value};
  }();
  return knobs;
}

// An occupancy query of decode entry i (entry.*kQuery: resident CTAs per SM or resident 2-CTA
// clusters) for the current device, asked once per (entry, device): plan and run need it on every
// call and the CUDA occupancy API is not free. A 0 from ctas_per_sm means the query failed (the
// caller reports it) and is asked again next time; 0 clusters is an answer (no pairing).
template <int (*DecodeEntry::*kQuery)(), bool kZeroIsAnswer>
int asked_once(size_t i, int device) {
  constexpr int kMaxDevices = 64;
  const std::span<const DecodeEntry> entries = cuda::portable_decode_entries();
  // value + 1 per (entry, device); 0 = not asked yet.
  static std::vector<std::atomic<int>> cache(entries.size() * kMaxDevices);
  if (device < 0 || device >= kMaxDevices) return (entries[i].*kQuery)();
  std::atomic<int>& slot = cache[i * kMaxDevices + device];
  int known = slot.load(std::memory_order_relaxed);
  if (known == 0) {
    const int value = (entries[i].*kQuery)();
    if (value == 0 && !kZeroIsAnswer) return 0;
    known = value + 1;
    slot.store(known, std::memory_order_relaxed);
  }
  return known - 1;
}

// The built decode tiles as the launch policy sees them, answered from the CUDA runtime; the
// occupancy queries act on the current device, which must be `device`.
class BuiltDecodeTiles final : public cuda::DecodeTileSet {
 public:
  explicit BuiltDecodeTiles(int device)
      : entries_(cuda::portable_decode_entries()), device_(device) {}
  size_t size() const override { return entries_.size(); }
  const cuda::DecodeTile& tile(size_t i) const override { return entries_[i].tile; }
  int smem_bytes(size_t i) const override { return entries_[i].smem(); }
  int ctas_per_sm(size_t i) const override {
    return asked_once<&DecodeEntry::ctas_per_sm, false>(i, device_);
  }
  int pair_clusters(size_t i) const override {
    return asked_once<&DecodeEntry::pair_clusters, true>(i, device_);
  }
  const DecodeEntry& entry(size_t i) const { return entries_[i]; }

 private:
  std::span<const DecodeEntry> entries_;
  int device_;
};

// The format of the kernel-table rows that serve a main cache of `format`: the V4.1 kernels
// (v41_fp8 rows) read either V4.1 record in either cache, a v41_fp4 main cache included.
KvCacheFormat decode_kernel_format(KvCacheFormat format) {
  return format == KvCacheFormat::kV41Fp4 ? KvCacheFormat::kV41Fp8 : format;
}

// The decode tile for `problem` on a device (decode_launch_policy.h), or nullopt with *why_not.
std::optional<size_t> decode_tile(const BuiltDecodeTiles& tiles, const SparseDecodeProblem& problem,
                                  const DeviceLimits& limits, std::string* why_not) {
  if (!knobs_valid(why_not)) return std::nullopt;
  const KvCacheFormat format = decode_kernel_format(problem.format);
  if (!cuda::has_decode_tiles(tiles, format, problem.d_qk)) {
    if (const char* why = cuda::why_not_built("portable_sparse_decode", format, problem.d_qk)) {
      *why_not = std::string(kv_cache_format_name(problem.format)) + " d_qk " +
                 std::to_string(problem.d_qk) + " decode kernels are not in this build: " + why;
      return std::nullopt;
    }
  }
  return cuda::choose_decode_tile(tiles, format, problem.d_qk, problem.h_q, limits.smem_optin,
                                  decode_knobs(), why_not);
}

template <KvCacheFormat kFormat>
bool portable_decode_supports(const SparseDecodeProblem& problem, std::string* why_not) {
  if (decode_kernel_format(problem.format) != kFormat) {
    *why_not =
        kFormat == KvCacheFormat::kV41Fp8
            ? std::string("serves v41_fp8 and v41_fp4 main caches only")
            : std::string("serves the ") + kv_cache_format_name(kFormat) + " cache format only";
    return false;
  }
  if (!problem.device.is_cuda()) {
    *why_not = "tensors are not on a CUDA device";
    return false;
  }
  if (problem.d_v != 512) {
    *why_not = "d_v must be 512, got " + std::to_string(problem.d_v);
    return false;
  }
  if (problem.h_q < 1 || problem.h_q > 128) {
    *why_not = "h_q must be in [1, 128], got " + std::to_string(problem.h_q);
    return false;
  }
  if (problem.b * problem.s_q > 0x7fffffff / 2) {
    *why_not = "b * s_q = " + std::to_string(problem.b * problem.s_q) + " is too large";
    return false;
  }
  DeviceLimits limits;
  if (!device_is_sm80_plus(problem.device, &limits, why_not)) return false;
  return decode_tile(BuiltDecodeTiles(problem.device.index), problem, limits, why_not).has_value();
}

// The device's limits and the decode tile chosen for `problem` on it, or a kUnsupported status.
Status decode_tile_for(const SparseDecodeProblem& problem, const char* caller,
                       const BuiltDecodeTiles& tiles, DeviceLimits* limits, size_t* tile) {
  std::string why_not;
  std::optional<size_t> chosen;
  if (!device_is_sm80_plus(problem.device, limits, &why_not) ||
      !(chosen = decode_tile(tiles, problem, *limits, &why_not))) {
    return unsupported(std::string(caller) + ": " + why_not);
  }
  *tile = *chosen;
  return {};
}

Status portable_decode_plan(const SparseDecodeProblem& problem, const RunOptions&,
                            DecodePlan* plan) {
  const BuiltDecodeTiles tiles(problem.device.index);
  DeviceLimits limits;
  size_t tile = 0;
  SMLA_RETURN_IF_ERROR(decode_tile_for(problem, "plan_sparse_decode", tiles, &limits, &tile));
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(problem.device.index));
  cuda::DecodeLaunchShape shape;
  SMLA_RETURN_IF_ERROR(
      cuda::choose_decode_launch(problem, limits, tiles, decode_knobs(), tile, &shape));
  cuda::fill_decode_plan(problem, limits, tiles, decode_knobs(), shape, plan);
  return {};
}

// The split decode once its kernel and launch shape are chosen (both decode kernels): the plan's
// workspace checked, the planner over `block_keys`-key blocks (schedule kBuild), the kernel's
// launch filled from the workspace and run by `launch_kernel(launch, stream)`, then the combine.
// Over an index union `params` is the union's call (index_union_params) and `over_union` says
// where its bits are.
template <class LaunchKernel>
Status run_split_decode(const DecodeParams& params, const DecodePlan& plan, void* workspace,
                        size_t workspace_bytes, DecodeSchedule schedule, cudaStream_t stream,
                        const cuda::DecodeLaunchShape& shape, int block_keys,
                        LaunchKernel&& launch_kernel,
                        const cuda::decode::IndexUnionRows& over_union = {}) {
  const int num_parts = plan.num_sm_parts;
  const int64_t num_queries = params.problem.b * params.problem.s_q;
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(num_queries, num_parts, params.problem.h_q, 512);
  if (num_parts < 1 || static_cast<int64_t>(workspace_bytes) < layout.total_bytes ||
      workspace == nullptr) {
    return invalid_argument("sparse_decode: the workspace (" + std::to_string(workspace_bytes) +
                            " bytes) does not fit the plan's " + std::to_string(num_parts) +
                            " parts (" + std::to_string(layout.total_bytes) + " bytes)");
  }
  // Planner and split kernel stay ordinary launches: the combine (a programmatic dependent of
  // the split kernel) reads the planner's split_offsets before its grid-dependency wait, which
  // is safe only while the planner has completed before the split kernel starts.
  // The plan keeps the part count; the floor of units per part follows from the same problem.
  // A plan whose count the shape does not give (the part-count knob changed in between) runs the
  // plain cost line.
  const int64_t min_units = shape.num_parts == num_parts ? shape.min_units : 0;
  if (schedule == DecodeSchedule::kBuild) {
    SMLA_RETURN_IF_ERROR(
        cuda::launch_decode_planner(params, num_parts, min_units, block_keys, workspace, stream));
  }
  const planning::DecodeWorkspace ws = planning::carve_decode_workspace(workspace, layout);
  cuda::decode::DecodeLaunch launch;
  launch.p = params;
  launch.num_parts = num_parts;
  launch.parts = ws.parts;
  launch.split_offsets = ws.split_offsets;
  launch.partial_lse = ws.partial_lse;
  launch.partial_out = ws.partial_out;
  launch.pair_head_groups = shape.clusters > 0;
  launch.index_union = over_union;
  SMLA_RETURN_IF_ERROR(launch_kernel(launch, stream));
  // Without lengths tensors every list is full and the host knows the schedule: where it splits
  // no query, the combine would only launch CTAs that exit, so it is not launched. (An index
  // union's lengths are the device's.)
  const SparseDecodeProblem& p = params.problem;
  if (over_union.heads_per_token == 0 && cuda::decode_lists_full(p) &&
      planning::full_lists_split_nothing(num_queries, cuda::decode_full_list_blocks(p, block_keys),
                                         num_parts, min_units)) {
    return {};
  }
  return cuda::launch_split_combine(params, num_parts, workspace, stream,
                                    over_union.heads_per_token);
}

Status portable_decode_run(const DecodeParams& params, const DecodePlan& plan, void* workspace,
                           size_t workspace_bytes, DecodeSchedule schedule,
                           const RunOptions& options) {
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(params.problem.device.index));
  const BuiltDecodeTiles tiles(params.problem.device.index);
  DeviceLimits limits;
  size_t tile = 0;
  SMLA_RETURN_IF_ERROR(decode_tile_for(params.problem, "sparse_decode", tiles, &limits, &tile));
  // The plan's kernel: plan and run ask choose_decode_launch with the same problem.
  cuda::DecodeLaunchShape shape;
  SMLA_RETURN_IF_ERROR(
      cuda::choose_decode_launch(params.problem, limits, tiles, decode_knobs(), tile, &shape));
  const DecodeEntry& entry = tiles.entry(shape.tile);
  return run_split_decode(params, plan, workspace, workspace_bytes, schedule,
                          static_cast<cudaStream_t>(options.stream), shape, entry.tile.block_keys,
                          entry.launch);
}

// ---- Hopper decode (sm_90a) -----------------------------------------------------------------

// Whether the decode of `problem` runs over its requests' index unions (SMLA_DECODE_INDEX_UNION).
bool index_union_chosen(const SparseDecodeProblem& problem) {
  return cuda::index_union_chosen(problem, cuda::cuda_knobs().decode_index_union.value);
}

// The Hopper decode for the problem's cache format if this build has it and it can run here:
// an sm_90 device with the shared memory it needs, 1..128 heads (fewer than 64 in a group pad its
// 64-row tile). SMLA_DECODE_SM90A=1 runs it wherever it can, =0 never; unset, only where its
// launch has enough pairs of blocks for its head count and the device's SMs
// (cuda::sm90a_decode_by_default, decode_launch_policy.h: below that the portable kernels are
// faster), or where SMLA_DECODE_INDEX_UNION=1 runs the problem over its index unions.
const cuda::Sm90aDecodeEntry* sm90a_decode_entry(const SparseDecodeProblem& problem,
                                                 std::string* why_not) {
  if (!knobs_valid(why_not)) return nullptr;
  const std::optional<int>& knob = cuda::cuda_knobs().decode_sm90a.value;
  if (knob && *knob == 0) {
    *why_not = "turned off by SMLA_DECODE_SM90A=0";
    return nullptr;
  }
  if (!problem.device.is_cuda()) {
    *why_not = "tensors are not on a CUDA device";
    return nullptr;
  }
  const cuda::Sm90aDecodeEntry* entry = nullptr;
  for (const cuda::Sm90aDecodeEntry& e : cuda::sm90a_decode_entries()) {
    if (e.format == problem.format && e.d_qk == problem.d_qk) entry = &e;
  }
  if (entry == nullptr) {
    const char* why = cuda::why_not_built("sm90a_sparse_decode", problem.format, problem.d_qk);
    *why_not = why != nullptr ? std::string(why)
                              : std::string(
                                    "serves v32_fp8 (d_qk 576), v4_fp8 (d_qk 512) and bf16 "
                                    "(d_qk 576, 512) caches, got ") +
                                    kv_cache_format_name(problem.format) + " d_qk " +
                                    std::to_string(problem.d_qk);
    return nullptr;
  }
  if (problem.d_v != 512) {
    *why_not = "d_v must be 512, got " + std::to_string(problem.d_v);
    return nullptr;
  }
  if (problem.h_q < 1 || problem.h_q > 128) {
    *why_not = "h_q must be in [1, 128], got " + std::to_string(problem.h_q);
    return nullptr;
  }
  if (problem.b * problem.s_q > 0x7fffffff / 2) {
    *why_not = "b * s_q = " + std::to_string(problem.b * problem.s_q) + " is too large";
    return nullptr;
  }
  if (!sm90_device_fits(problem.device, entry->smem(), why_not)) return nullptr;
  if (!knob && !index_union_chosen(problem)) {
    DeviceLimits limits;
    if (!device_limits(problem.device, &limits, why_not)) return nullptr;
    if (!cuda::sm90a_decode_by_default(problem, limits.sm_count)) {
      const std::optional<int64_t> pairs =
          cuda::sm90a_decode_min_default_pairs(problem, limits.sm_count);
      *why_not = (pairs ? "the portable kernels are faster below " + std::to_string(*pairs) +
                              " pairs of 64-key blocks on " + std::to_string(limits.sm_count) +
                              " SMs at " + std::to_string(problem.h_q) + " heads, got " +
                              std::to_string(cuda::sm90a_decode_pairs(problem))
                        : "the portable 16-row tile is faster below " +
                              std::to_string(cuda::kSm90aDecodeMinDefaultHeads) +
                              " heads, got h_q " + std::to_string(problem.h_q)) +
                 " (SMLA_DECODE_SM90A=1 runs it anyway)";
      return nullptr;
    }
  }
  return entry;
}

bool sm90a_decode_supports(const SparseDecodeProblem& problem, std::string* why_not) {
  return sm90a_decode_entry(problem, why_not) != nullptr;
}

using cuda::kSm90aDecodeBlockKeys;
using cuda::kSm90aDecodeRows;

// The Hopper decode's launch of `problem`, or of its union's call (`launched`). Over an index
// union the plain cost line over every SM: the part-count rule sizes parts for full lists, and a
// union is shorter than s_q full lists by the rows its tokens share. SMLA_DECODE_NUM_PARTS
// replaces the count (the plain cost line), as on the portable kernels' unpaired launches.
cuda::DecodeLaunchShape sm90a_decode_shape(const SparseDecodeProblem& launched,
                                           const DeviceLimits& limits, bool over_union) {
  cuda::DecodeLaunchShape shape =
      cuda::one_cta_per_sm_decode_shape(launched, limits, kSm90aDecodeRows, kSm90aDecodeBlockKeys);
  const std::optional<int> forced = decode_knobs().num_parts;
  if (over_union || forced) {
    shape.num_parts = forced ? *forced : std::max(1, limits.sm_count / shape.head_groups);
    shape.min_units = 0;
    shape.working_parts = shape.num_parts;
  }
  return shape;
}

Status sm90a_decode_plan(const SparseDecodeProblem& problem, const RunOptions&, DecodePlan* plan) {
  std::string why_not;
  const cuda::Sm90aDecodeEntry* entry = sm90a_decode_entry(problem, &why_not);
  if (entry == nullptr) return unsupported("plan_sparse_decode: " + why_not);
  DeviceLimits limits;
  if (!device_limits(problem.device, &limits, &why_not)) {
    return unsupported("plan_sparse_decode: " + why_not);
  }
  const bool over_union = index_union_chosen(problem);
  const SparseDecodeProblem launched = over_union ? cuda::index_union_problem(problem) : problem;
  const cuda::DecodeLaunchShape shape = sm90a_decode_shape(launched, limits, over_union);
  plan->num_sm_parts = shape.num_parts;
  plan->workspace_bytes = static_cast<size_t>(
      cuda::sm90a_decode_workspace(problem, launched, shape.num_parts, over_union).total_bytes);
  plan->index_union = over_union;
  plan->kernel_config = entry->name;
  plan->kernel_family = "sm90a_sparse_decode";
  plan->rows_per_cta = kSm90aDecodeRows;
  plan->keys_per_block = kSm90aDecodeBlockKeys;
  plan->head_groups = shape.head_groups;
  plan->warp_specialized = true;
  plan->paired_head_groups = false;
  plan->min_units_per_part = shape.min_units;
  plan->reason =
      "Hopper seesaw (a copying producer warpgroup, wgmma consumers that dequantise): " +
      std::to_string(shape.num_parts) + " parts x " + std::to_string(shape.head_groups) +
      " head groups of 64 rows x 64-key blocks" +
      (shape.min_units > 0
           ? " (parts of >= " + std::to_string(shape.min_units) + " units: sized for full lists)"
           : "") +
      " = 1 CTA per SM on " + std::to_string(limits.sm_count) + " SMs" +
      (over_union
           ? "; the " + std::to_string(problem.s_q) + " tokens of a request as one query of " +
                 std::to_string(launched.h_q) + " heads over the union of their lists"
           : "");
  return {};
}

Status sm90a_decode_run(const DecodeParams& params, const DecodePlan& plan, void* workspace,
                        size_t workspace_bytes, DecodeSchedule schedule,
                        const RunOptions& options) {
  std::string why_not;
  const cuda::Sm90aDecodeEntry* entry = sm90a_decode_entry(params.problem, &why_not);
  if (entry == nullptr) return unsupported("sparse_decode: " + why_not);
  DeviceLimits limits;
  if (!device_limits(params.problem.device, &limits, &why_not)) {
    return unsupported("sparse_decode: " + why_not);
  }
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(params.problem.device.index));
  const auto stream = static_cast<cudaStream_t>(options.stream);
  if (!plan.index_union) {
    const cuda::DecodeLaunchShape shape = sm90a_decode_shape(params.problem, limits, false);
    return run_split_decode(params, plan, workspace, workspace_bytes, schedule, stream, shape,
                            kSm90aDecodeBlockKeys, entry->launch);
  }
  // Over an index union: the unions of this call's lists, then the split decode of the union's
  // call with its schedule built every call (the unions' lengths change with the lists, whatever
  // `schedule` says).
  const SparseDecodeProblem launched = cuda::index_union_problem(params.problem);
  const cuda::DecodeLaunchShape shape = sm90a_decode_shape(launched, limits, true);
  const cuda::Sm90aDecodeWorkspace ws =
      cuda::sm90a_decode_workspace(params.problem, launched, plan.num_sm_parts, true);
  if (workspace == nullptr || static_cast<int64_t>(workspace_bytes) < ws.total_bytes) {
    return invalid_argument("sparse_decode: the workspace (" + std::to_string(workspace_bytes) +
                            " bytes) does not fit the plan's index union (" +
                            std::to_string(ws.total_bytes) + " bytes)");
  }
  SMLA_RETURN_IF_ERROR(cuda::launch_index_union(params, ws.index_union, workspace, stream));
  const planning::IndexUnion u = planning::carve_index_union(workspace, ws.index_union);
  const cuda::decode::IndexUnionRows over_union{static_cast<int>(params.problem.h_q), u.bits,
                                                u.extra_bits};
  return run_split_decode(cuda::index_union_params(params, launched, ws.index_union, workspace),
                          plan, workspace, workspace_bytes, DecodeSchedule::kBuild, stream, shape,
                          kSm90aDecodeBlockKeys, entry->launch, over_union);
}

constexpr PrefillKernel kPrefillKernels[] = {
    {"sm90a_sparse_prefill", Backend::kCuda, sm90a_prefill_supports, sm90a_prefill_run},
    {"portable_sparse_prefill", Backend::kCuda, portable_prefill_supports, portable_prefill_run},
};

constexpr DecodeKernel kDecodeKernels[] = {
    {"sm90a_sparse_decode", Backend::kCuda, sm90a_decode_supports, sm90a_decode_plan,
     sm90a_decode_run},
    {"portable_sparse_decode_v32fp8", Backend::kCuda,
     portable_decode_supports<KvCacheFormat::kV32Fp8>, portable_decode_plan, portable_decode_run},
    {"portable_sparse_decode_v4fp8", Backend::kCuda,
     portable_decode_supports<KvCacheFormat::kV4Fp8>, portable_decode_plan, portable_decode_run},
    {"portable_sparse_decode_bf16", Backend::kCuda, portable_decode_supports<KvCacheFormat::kBf16>,
     portable_decode_plan, portable_decode_run},
    // DeepSeek V4.1: a v41_fp8 (or v41_fp4) main cache, an optional v41_fp8 or v41_fp4 extra
    // cache, either page layout each (the V4.1 split kernels,
    // portable/sparse_decode/v41_*kernel.cuh).
    {"portable_sparse_decode_v41fp8", Backend::kCuda,
     portable_decode_supports<KvCacheFormat::kV41Fp8>, portable_decode_plan, portable_decode_run},
};

}  // namespace

std::span<const PrefillKernel> cuda_prefill_kernels() { return kPrefillKernels; }
std::span<const DecodeKernel> cuda_decode_kernels() { return kDecodeKernels; }

}  // namespace sparse_mla::detail
