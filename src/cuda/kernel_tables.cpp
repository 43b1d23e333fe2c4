// The CUDA back end's kernel tables (core/kernel_variant.h): portable sm_80+ sparse prefill and
// sparse decode (one variant per cache format). Each entry checks the device (compute
// capability, opt-in shared memory) in `supports`, and `run` launches the tile instantiation
// (head rows x keys per block) that cuda/tile_choice.h picks for h_q and the device's shared
// memory. Decode `run` sequences planner (kBuild only) -> split kernel -> combine on one stream,
// without host synchronisation or allocation.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>

#include "core/kernel_variant.h"
#include "cuda/combine/launch.h"
#include "cuda/knobs.h"
#include "cuda/planning/launch.h"
#include "cuda/portable/sparse_decode/launch.h"
#include "cuda/portable/sparse_prefill/launch.h"
#if SMLA_WITH_SM90A
#include "cuda/sm90a/sparse_prefill/launch.h"
#endif
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/device_guard.h"
#include "cuda/tile_choice.h"
#include "planning/decode_part_count.h"
#include "planning/decode_schedule_builder.h"
#include "planning/decode_workspace.h"

namespace sparse_mla::detail {
namespace {

namespace pp = sparse_mla::cuda::portable_prefill;
namespace pd = sparse_mla::cuda::portable_decode;

struct DeviceLimits {
  int cc_major = 0, cc_minor = 0, sm_count = 0, smem_optin = 0;
};

bool device_limits(const Device& device, DeviceLimits* limits, std::string* why_not) {
  const int d = device.index;
  if (cudaDeviceGetAttribute(&limits->cc_major, cudaDevAttrComputeCapabilityMajor, d) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&limits->cc_minor, cudaDevAttrComputeCapabilityMinor, d) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&limits->sm_count, cudaDevAttrMultiProcessorCount, d) != cudaSuccess ||
      cudaDeviceGetAttribute(&limits->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d) !=
          cudaSuccess) {
    cudaGetLastError();
    *why_not = "cannot query CUDA device " + std::to_string(d);
    return false;
  }
  // SMLA_DEVICE_SMEM_OPTIN (cuda/knobs.h): the tiles of a device with less shared memory, so
  // that the A100's and the L40's tile choices run on an H200 (scripts/gpu_check.sh, sm80 mode).
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

using PrefillLaunchFn = Status (*)(const PrefillParams&, cudaStream_t);
struct PrefillEntry {
  int d_qk, rows, block_keys;
  PrefillLaunchFn launch;
  int (*smem)();
};
#define SMLA_PREFILL_ENTRY(DQK, ROWS, KEYS)                               \
  PrefillEntry {                                                          \
    DQK, ROWS, KEYS, pp::launch_portable_sparse_prefill<DQK, ROWS, KEYS>, \
        pp::prefill_smem_bytes<DQK, ROWS, KEYS>                           \
  }
#define SMLA_PREFILL_ENTRIES(DQK)                                       \
  SMLA_PREFILL_ENTRY(DQK, 16, 64), SMLA_PREFILL_ENTRY(DQK, 16, 32),     \
      SMLA_PREFILL_ENTRY(DQK, 32, 64), SMLA_PREFILL_ENTRY(DQK, 32, 32), \
      SMLA_PREFILL_ENTRY(DQK, 64, 64), SMLA_PREFILL_ENTRY(DQK, 64, 32)
constexpr std::array<PrefillEntry, 12> kPrefillEntries{{
    SMLA_PREFILL_ENTRIES(576),
    SMLA_PREFILL_ENTRIES(512),
}};
#undef SMLA_PREFILL_ENTRIES
#undef SMLA_PREFILL_ENTRY

// The prefill tile for (d_qk, h_q) on a device: the standard 64-key tiles where they fit, else
// the compact 32-key ones, else fewer head rows (cuda/tile_choice.h). SMLA_PREFILL_BLOCK_KEYS
// forces the key count (tests/cpp/CMakeLists.txt runs the GPU prefill tests both ways).
const PrefillEntry* prefill_entry(int64_t d_qk, int64_t h_q, const DeviceLimits& limits,
                                  std::string* why_not) {
  if (!knobs_valid(why_not)) return nullptr;
  return cuda::choose_tile_entry(
      std::span<const PrefillEntry>(kPrefillEntries),
      [&](const PrefillEntry& e) { return e.d_qk == d_qk; }, pp::prefill_rows_for(h_q), 64,
      cuda::cuda_knobs().prefill_block_keys.value.value_or(0), limits.smem_optin, why_not);
}

bool portable_prefill_supports(const SparsePrefillProblem& problem, std::string* why_not) {
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

// True if the library's sm_90a code can run on `device`: the build compiled it (SMLA_WITH_SM90A,
// cmake/cuda.cmake) and the device is compute capability 9.0 (sm_90a SASS runs on no other).
// SMLA_PREFILL_SM90A=0 (cuda/knobs.h) turns the Hopper prefill off, so the portable kernel runs.
bool sm90a_prefill_supports(const SparsePrefillProblem& problem, std::string* why_not) {
#if SMLA_WITH_SM90A
  if (!knobs_valid(why_not)) return false;
  if (cuda::cuda_knobs().prefill_sm90a.value.value_or(1) == 0) {
    *why_not = "turned off by SMLA_PREFILL_SM90A=0";
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
  if (problem.d_qk != 576 && problem.d_qk != 512) {
    *why_not = "d_qk must be 576 or 512, got " + std::to_string(problem.d_qk);
    return false;
  }
  DeviceLimits limits;
  if (!device_limits(problem.device, &limits, why_not)) return false;
  if (limits.cc_major != 9 || limits.cc_minor != 0) {
    *why_not = "needs an sm_90 device (wgmma, setmaxnreg: sm_90a code); device " +
               std::to_string(problem.device.index) + " is " + std::to_string(limits.cc_major) +
               "." + std::to_string(limits.cc_minor);
    return false;
  }
  const int needed = problem.d_qk == 576 ? cuda::sm90a_prefill::sm90a_prefill_smem_bytes<576>()
                                         : cuda::sm90a_prefill::sm90a_prefill_smem_bytes<512>();
  if (limits.smem_optin < needed) {
    *why_not = "needs " + std::to_string(needed) + " B of shared memory per block, the device "
               "allows " + std::to_string(limits.smem_optin);
    return false;
  }
  return true;
#else
  (void)problem;
  *why_not = "this build has no sm_90a code (SMLA_CUDA_ARCHS without 90a)";
  return false;
#endif
}

Status sm90a_prefill_run(const PrefillParams& params, const RunOptions& options) {
#if SMLA_WITH_SM90A
  std::string why_not;
  if (!sm90a_prefill_supports(params.problem, &why_not)) {
    return unsupported("sparse_prefill: " + why_not);
  }
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(params.problem.device.index));
  auto stream = static_cast<cudaStream_t>(options.stream);
  return params.problem.d_qk == 576
             ? cuda::sm90a_prefill::launch_sm90a_sparse_prefill<576>(params, stream)
             : cuda::sm90a_prefill::launch_sm90a_sparse_prefill<512>(params, stream);
#else
  (void)options;
  return unsupported("sparse_prefill: this build has no sm_90a code");
#endif
}

// ---- decode --------------------------------------------------------------------------------

using DecodeLaunchFn = Status (*)(const pd::DecodeLaunch&, cudaStream_t);
struct DecodeEntry {
  KvCacheFormat format;
  int d_qk, rows, block_keys;
  bool warp_specialized;  // producer warps gather and dequantise (warp_specialized_kernel.cuh)
  DecodeLaunchFn launch;
  int (*smem)();
  int (*ctas_per_sm)();
  int (*pair_clusters)();
};
#define SMLA_DECODE_ENTRY(FORMAT, DQK, ROWS, KEYS)                                 \
  DecodeEntry {                                                                    \
    KvCacheFormat::FORMAT, DQK, ROWS, KEYS, false,                                 \
        pd::launch_portable_sparse_decode<KvCacheFormat::FORMAT, DQK, ROWS, KEYS>, \
        pd::decode_smem_bytes<KvCacheFormat::FORMAT, DQK, ROWS, KEYS>,             \
        pd::decode_ctas_per_sm<KvCacheFormat::FORMAT, DQK, ROWS, KEYS>,            \
        pd::decode_pair_clusters<KvCacheFormat::FORMAT, DQK, ROWS, KEYS>           \
  }
#define SMLA_DECODE_ENTRIES(FORMAT, DQK)                                              \
  SMLA_DECODE_ENTRY(FORMAT, DQK, 16, 64), SMLA_DECODE_ENTRY(FORMAT, DQK, 16, 32),     \
      SMLA_DECODE_ENTRY(FORMAT, DQK, 32, 64), SMLA_DECODE_ENTRY(FORMAT, DQK, 32, 32), \
      SMLA_DECODE_ENTRY(FORMAT, DQK, 64, 64), SMLA_DECODE_ENTRY(FORMAT, DQK, 64, 32)
int no_pair_clusters() { return 0; }  // a 16-row tile has one head group
#define SMLA_DECODE_WARP_SPECIALIZED_ENTRY(FORMAT, DQK)                                       \
  DecodeEntry {                                                                               \
    KvCacheFormat::FORMAT, DQK, 16, 32, true,                                                 \
        pd::launch_warp_specialized_decode<KvCacheFormat::FORMAT, DQK>,                       \
        pd::warp_specialized_decode_smem_bytes<KvCacheFormat::FORMAT, DQK>,                   \
        pd::warp_specialized_decode_ctas_per_sm<KvCacheFormat::FORMAT, DQK>, no_pair_clusters \
  }
constexpr std::array<DecodeEntry, 26> kDecodeEntries{{
    SMLA_DECODE_ENTRIES(kV32Fp8, 576),
    SMLA_DECODE_ENTRIES(kV4Fp8, 512),
    SMLA_DECODE_ENTRIES(kBf16, 576),
    SMLA_DECODE_ENTRIES(kBf16, 512),
    SMLA_DECODE_WARP_SPECIALIZED_ENTRY(kV32Fp8, 576),
    SMLA_DECODE_WARP_SPECIALIZED_ENTRY(kV4Fp8, 512),
}};
#undef SMLA_DECODE_WARP_SPECIALIZED_ENTRY
#undef SMLA_DECODE_ENTRIES
#undef SMLA_DECODE_ENTRY

// The entry of the same format, d_qk and tile as `e` that is (or is not) the warp-specialised
// kernel, or nullptr (bf16 caches, tiles other than 16 x 32).
const DecodeEntry* tile_twin(const DecodeEntry& e, bool warp_specialized) {
  for (const DecodeEntry& twin : kDecodeEntries) {
    if (twin.warp_specialized == warp_specialized && twin.format == e.format &&
        twin.d_qk == e.d_qk && twin.rows == e.rows && twin.block_keys == e.block_keys) {
      return &twin;
    }
  }
  return nullptr;
}

// Whether the 16-row x 32-key tile of an FP8 cache runs the warp-specialised kernel (default) or
// the split kernel's register-Q tile (SMLA_DECODE_WARP_SPECIALIZED=0, for tests and A/B runs).
// A bf16 cache has nothing for producer warps to convert and always runs the split kernel.
bool warp_specialized_wanted(KvCacheFormat format) {
  return format != KvCacheFormat::kBf16 &&
         cuda::cuda_knobs().decode_warp_specialized.value.value_or(1) == 1;
}

// The decode tile for (format, d_qk, h_q) on a device (cuda/tile_choice.h): 16 head rows prefer
// the compact 32-key tile (the register-Q tile: 2 CTAs of 8 warps per SM instead of one CTA of 4
// on sm_90, so one CTA's per-block gather latency overlaps the other's work; measured on the
// H200 with the 4-warp version: 0.68-0.84x the 64-key time),
// larger tiles the 64-key one (the compact one measured 1.0-1.35x slower there); either falls
// back to the other key count, then to fewer head rows, where the shared memory does not fit.
// SMLA_DECODE_BLOCK_KEYS forces the key count (tests/cpp/CMakeLists.txt runs both).
const DecodeEntry* decode_entry(KvCacheFormat format, int64_t d_qk, int64_t h_q,
                                const DeviceLimits& limits, std::string* why_not) {
  if (!knobs_valid(why_not)) return nullptr;
  const int rows = pd::decode_rows_for(h_q);
  const DecodeEntry* tile = cuda::choose_tile_entry(
      std::span<const DecodeEntry>(kDecodeEntries),
      [&](const DecodeEntry& e) {
        return e.format == format && e.d_qk == d_qk && !e.warp_specialized;
      },
      rows, rows == 16 ? 32 : 64, cuda::cuda_knobs().decode_block_keys.value.value_or(0),
      limits.smem_optin, why_not);
  // The 16 x 32 tile runs with producer warps where their kernel's shared memory (raw and bf16
  // rings) fits: v32_fp8 180,224 B, v4_fp8 162,816 B, so sm_90 for both, the A100 for v4_fp8.
  if (tile != nullptr && warp_specialized_wanted(format)) {
    const DecodeEntry* producers = tile_twin(*tile, true);
    if (producers != nullptr && producers->smem() <= limits.smem_optin) return producers;
  }
  return tile;
}

template <KvCacheFormat kFormat>
bool portable_decode_supports(const SparseDecodeProblem& problem, std::string* why_not) {
  if (problem.format != kFormat) {
    *why_not = std::string("serves the ") + kv_cache_format_name(kFormat) + " cache format only";
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
  return decode_entry(problem.format, problem.d_qk, problem.h_q, limits, why_not) != nullptr;
}

// The device's limits and the decode tile chosen for `problem` on it, or a kUnsupported status.
Status decode_entry_for(const SparseDecodeProblem& problem, const char* caller,
                        DeviceLimits* limits, const DecodeEntry** entry) {
  std::string why_not;
  if (!device_is_sm80_plus(problem.device, limits, &why_not) ||
      (*entry = decode_entry(problem.format, problem.d_qk, problem.h_q, *limits, &why_not)) ==
          nullptr) {
    return unsupported(std::string(caller) + ": " + why_not);
  }
  return {};
}

// How a decode call launches its tile: parts of the split schedule, and whether the two head
// groups of 65..128 heads run as 2-CTA clusters that share each block's gather and
// dequantisation (quantized caches on sm_90+).
struct DecodeLaunchShape {
  int head_groups = 1;
  int num_parts = 1;
  int64_t min_units = 0;  // the schedule's floor of units per part (planning/decode_part_count.h)
  int working_parts = 1;  // parts that hold blocks when every list is full
  int ctas_per_sm = 0;    // unpaired launches
  int clusters = 0;       // paired launches: resident 2-CTA clusters on the device; 0 = unpaired
};

// Paired head groups by default for every quantized format (bf16 caches have no gather or
// dequantisation to share). Measured on the H200 (one build, one call, 5c22274 + the st.async
// publish): 128 heads, paired / unpaired time v4_fp8 0.87-0.90x, v32_fp8 0.98-0.99x (b = 64..256
// and topk 16384); with the earlier fenced cluster barriers v32_fp8 was 1.02-1.06x.
// SMLA_DECODE_PAIR_HEAD_GROUPS=0 / =1 turns pairing off / on (tests and A/B runs).
bool pairing_wanted(KvCacheFormat format) {
  const std::optional<int> forced = cuda::cuda_knobs().decode_pair_head_groups.value;
  return forced ? *forced == 1 : format != KvCacheFormat::kBf16;
}

// An occupancy query of a decode entry (entry->*kQuery: resident CTAs per SM or resident 2-CTA
// clusters) for the current device, asked once per (entry, device): plan and run need it on every
// call and the CUDA occupancy API is not free. A 0 from ctas_per_sm means the query failed (the
// caller reports it) and is asked again next time; 0 clusters is an answer (no pairing).
template <int (*DecodeEntry::*kQuery)(), bool kZeroIsAnswer>
int asked_once(const DecodeEntry* entry, int device) {
  constexpr int kMaxDevices = 64;
  // value + 1 per (entry, device); 0 = not asked yet.
  static std::array<std::atomic<int>, kDecodeEntries.size() * kMaxDevices> cache{};
  if (device < 0 || device >= kMaxDevices) return (entry->*kQuery)();
  std::atomic<int>& slot = cache[(entry - kDecodeEntries.data()) * kMaxDevices + device];
  int known = slot.load(std::memory_order_relaxed);
  if (known == 0) {
    const int value = (entry->*kQuery)();
    if (value == 0 && !kZeroIsAnswer) return 0;
    known = value + 1;
    slot.store(known, std::memory_order_relaxed);
  }
  return known - 1;
}

int pair_clusters_of(const DecodeEntry* entry, int device) {
  return asked_once<&DecodeEntry::pair_clusters, true>(entry, device);
}

int ctas_per_sm_of(const DecodeEntry* entry, int device) {
  return asked_once<&DecodeEntry::ctas_per_sm, false>(entry, device);
}

int head_groups_of(const SparseDecodeProblem& problem, const DecodeEntry& entry) {
  return pd::decode_head_groups(problem.h_q, entry.rows);
}

// Resident clusters when this problem's launch is paired, else 0 (plan and run both ask this).
int paired_clusters(const SparseDecodeProblem& problem, const DecodeEntry& entry) {
  // 64-row tiles only (65..128 heads): a device whose shared memory forced 32-row tiles on 33..64
  // heads would also have 2 head groups, a launch no test runs.
  if (entry.rows != 64 || head_groups_of(problem, entry) != 2 || !pairing_wanted(entry.format)) {
    return 0;
  }
  return pair_clusters_of(&entry, problem.device.index);
}

// planning::choose_decode_part_count, remembered per (queries, bound blocks, slots): the search
// takes up to ~40 µs of host time (121 queries of 59 blocks on 132 slots), and the PyTorch
// package plans every layer's call. A map of at most kMaxRemembered shapes, cleared when full.
planning::DecodePartCount part_count_of(int64_t num_queries, int64_t bound_blocks, int32_t slots) {
  constexpr size_t kMaxRemembered = 4096;
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int32_t>, planning::DecodePartCount> remembered;
  const auto key = std::make_tuple(num_queries, bound_blocks, slots);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = remembered.find(key); it != remembered.end()) return it->second;
  }
  const planning::DecodePartCount count =
      planning::choose_decode_part_count(num_queries, bound_blocks, slots);
  const std::lock_guard<std::mutex> lock(mutex);
  if (remembered.size() >= kMaxRemembered) remembered.clear();
  remembered.emplace(key, count);
  return count;
}

Status decode_launch_shape(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                           const DecodeEntry& entry, DecodeLaunchShape* shape) {
  shape->head_groups = head_groups_of(problem, entry);
  shape->clusters = paired_clusters(problem, entry);
  if (shape->clusters > 0) {
    shape->num_parts = shape->clusters;  // one part = one cluster = both head groups
  } else {
    shape->ctas_per_sm = ctas_per_sm_of(&entry, problem.device.index);
    if (shape->ctas_per_sm < 1) {
      return unsupported("plan_sparse_decode: the " + std::to_string(entry.rows) + "-row, " +
                         std::to_string(entry.block_keys) +
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
    const int64_t bound_blocks = planning::query_blocks(
        problem.topk, problem.has_extra ? problem.extra_topk : 0, entry.block_keys);
    const planning::DecodePartCount count =
        part_count_of(problem.b * problem.s_q, bound_blocks, shape->num_parts);
    shape->num_parts = count.num_parts;
    shape->min_units = count.min_units;
    shape->working_parts = count.working_parts;
  }
  // SMLA_DECODE_NUM_PARTS (cuda/knobs.h) replaces the count of an unpaired launch (and drops the
  // floor), for experiments on the trade between per-piece costs (entry, fp32 partial rows, the
  // combine) and resident CTAs (decode_planner_and_combine.md); ctest runs one odd count.
  if (const std::optional<int> forced = cuda::cuda_knobs().decode_num_parts.value;
      forced && shape->clusters == 0) {
    shape->num_parts = *forced;
    shape->min_units = 0;
    shape->working_parts = *forced;
  }
  return {};
}

// The kernel and launch of a decode call; plan and run both ask, so that they agree. The
// warp-specialised 16-row kernel (decode_entry) runs where its working parts (those that hold
// blocks with full lists; the overhead-only ones exit at once) fit one wave of resident CTAs (one
// per SM): a part starts with a serial chain (indices, gather, dequantisation) before its first
// MMA, which the part-count rule's short parts in several waves pay again and again, while the
// split kernel runs two CTAs per SM. Measured on the H200 (session 14, 16 heads,
// benchmarks/results/exp-decode-warp-specialized-groups-2026-11-30/): one wave, V3.2 b = 64
// 89.8 us (split kernel 99.4), V4 b = 128 38.6 (48.6), b = 12 (150 parts, 126 working) 16.2
// (17.6), b = 1 13.6 (13.7); V4 b = 64 (320 parts of >= 5 units, 256 working) 35.4 (28.8), so
// that one falls back.
Status choose_decode_launch(const SparseDecodeProblem& problem, const DeviceLimits& limits,
                            const DecodeEntry** entry, DecodeLaunchShape* shape) {
  SMLA_RETURN_IF_ERROR(decode_launch_shape(problem, limits, **entry, shape));
  const DecodeEntry& chosen = **entry;
  if (!chosen.warp_specialized || static_cast<int64_t>(shape->working_parts) * shape->head_groups <=
                                      static_cast<int64_t>(limits.sm_count) * shape->ctas_per_sm) {
    return {};
  }
  *entry = tile_twin(chosen, false);  // every warp-specialised entry has its split-kernel twin
  return decode_launch_shape(problem, limits, **entry, shape);
}

// " (SMLA_DECODE_BLOCK_KEYS=64 does not fit N B of shared memory)" when the forced key count
// lost to the fallback (a device, or an SMLA_DEVICE_SMEM_OPTIN cap, with less shared memory than
// that tile needs), so that the plan says why the knob did not take; "" otherwise.
std::string forced_keys_refused(int block_keys, const DeviceLimits& limits) {
  const std::optional<int> forced = cuda::cuda_knobs().decode_block_keys.value;
  if (!forced || *forced == block_keys) return "";
  return " (SMLA_DECODE_BLOCK_KEYS=" + std::to_string(*forced) + " does not fit " +
         std::to_string(limits.smem_optin) + " B of shared memory)";
}

Status portable_decode_plan(const SparseDecodeProblem& problem, const RunOptions&,
                            DecodePlan* plan) {
  DeviceLimits limits;
  const DecodeEntry* entry = nullptr;
  SMLA_RETURN_IF_ERROR(decode_entry_for(problem, "plan_sparse_decode", &limits, &entry));
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(problem.device.index));
  DecodeLaunchShape shape;
  SMLA_RETURN_IF_ERROR(choose_decode_launch(problem, limits, &entry, &shape));
  const int64_t num_queries = problem.b * problem.s_q;
  const planning::DecodeWorkspaceLayout layout =
      planning::decode_workspace_layout(num_queries, shape.num_parts, problem.h_q, 512);
  plan->num_sm_parts = shape.num_parts;
  plan->workspace_bytes = static_cast<size_t>(layout.total_bytes);
  plan->reason = "portable split-KV: " + std::to_string(shape.num_parts) + " parts x " +
                 std::to_string(shape.head_groups) + " head groups of " +
                 std::to_string(entry->rows) + " rows x " + std::to_string(entry->block_keys) +
                 "-key blocks" + (entry->warp_specialized ? " (8 producer warps)" : "") +
                 forced_keys_refused(entry->block_keys, limits) +
                 (shape.min_units > 0 ? " (parts of >= " + std::to_string(shape.min_units) +
                                            " units: sized for full lists)"
                                      : "") +
                 " = " +
                 (shape.clusters > 0 ? std::to_string(shape.clusters) +
                                           " resident 2-CTA clusters (the head groups share each "
                                           "block's gather and dequantisation)"
                                     : std::to_string(shape.ctas_per_sm) + " CTA(s) per SM") +
                 " on " + std::to_string(limits.sm_count) + " SMs";
  return {};
}

Status portable_decode_run(const DecodeParams& params, const DecodePlan& plan, void* workspace,
                           size_t workspace_bytes, DecodeSchedule schedule,
                           const RunOptions& options) {
  cuda::DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(params.problem.device.index));
  DeviceLimits limits;
  const DecodeEntry* entry = nullptr;
  SMLA_RETURN_IF_ERROR(decode_entry_for(params.problem, "sparse_decode", &limits, &entry));
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
  auto stream = static_cast<cudaStream_t>(options.stream);
  // The plan's kernel: plan and run ask choose_decode_launch with the same problem.
  DecodeLaunchShape shape;
  SMLA_RETURN_IF_ERROR(choose_decode_launch(params.problem, limits, &entry, &shape));
  // Planner and split kernel stay ordinary launches: the combine (a programmatic dependent of
  // the split kernel) reads the planner's split_offsets before its grid-dependency wait, which
  // is safe only while the planner has completed before the split kernel starts.
  if (schedule == DecodeSchedule::kBuild) {
    // The plan keeps the part count; the floor of units per part follows from the same problem.
    // A plan whose count the shape does not give (the part-count knob changed in between) runs
    // the plain cost line.
    const int64_t min_units = shape.num_parts == num_parts ? shape.min_units : 0;
    SMLA_RETURN_IF_ERROR(cuda::launch_decode_planner(params, num_parts, min_units,
                                                     entry->block_keys, workspace, stream));
  }
  const planning::DecodeWorkspace ws = planning::carve_decode_workspace(workspace, layout);
  pd::DecodeLaunch launch;
  launch.p = params;
  launch.num_parts = num_parts;
  launch.parts = ws.parts;
  launch.split_offsets = ws.split_offsets;
  launch.partial_lse = ws.partial_lse;
  launch.partial_out = ws.partial_out;
  launch.pair_head_groups = paired_clusters(params.problem, *entry) > 0;
  SMLA_RETURN_IF_ERROR(entry->launch(launch, stream));
  return cuda::launch_split_combine(params, num_parts, workspace, stream);
}

constexpr PrefillKernel kPrefillKernels[] = {
    {"sm90a_sparse_prefill", Backend::kCuda, sm90a_prefill_supports, sm90a_prefill_run},
    {"portable_sparse_prefill", Backend::kCuda, portable_prefill_supports, portable_prefill_run},
};

constexpr DecodeKernel kDecodeKernels[] = {
    {"portable_sparse_decode_v32fp8", Backend::kCuda,
     portable_decode_supports<KvCacheFormat::kV32Fp8>, portable_decode_plan, portable_decode_run},
    {"portable_sparse_decode_v4fp8", Backend::kCuda,
     portable_decode_supports<KvCacheFormat::kV4Fp8>, portable_decode_plan, portable_decode_run},
    {"portable_sparse_decode_bf16", Backend::kCuda, portable_decode_supports<KvCacheFormat::kBf16>,
     portable_decode_plan, portable_decode_run},
};

}  // namespace

std::span<const PrefillKernel> cuda_prefill_kernels() { return kPrefillKernels; }
std::span<const DecodeKernel> cuda_decode_kernels() { return kDecodeKernels; }

}  // namespace sparse_mla::detail
