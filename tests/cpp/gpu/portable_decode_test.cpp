// GPU tests of the portable sparse decode path (planner -> split kernel -> combine, through
// plan_sparse_decode / sparse_decode with Backend::kCuda) against the CPU reference on the SPEC §5
// recipe: v32_fp8, v4_fp8, bf16 and V4.1 caches (v41_fp8 main, v41_fp8 / v41_fp4 extra, both page
// layouts), h_q 1..128, s_q 1..8, topk_length per request and
// per token, extra cache with its own page size, odd page sizes, empty requests, b = 321, and the
// kReuse path. Also checks (without a GPU) that the kernels' compile-time format traits match the
// host traits table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/device/kv_cache_traits.cuh"
#if defined(SMLA_WITH_CUDA)
#include "cuda/decode_launch_policy.h"
#include "cuda/kernel_registry.h"
#include "cuda/knobs.h"
#include "cuda/runtime/device_limits.h"
#endif
#include "gpu/gpu_test_support.h"
#include "sparse_mla/sparse_mla.h"
#include "verify/check.h"
#include "verify/recipe.h"

namespace sparse_mla {
namespace {

using test_support::kGpu;

template <class Traits>
void expect_traits_match(int d_qk) {
  const KvCacheFormatInfo& info = kv_cache_format_info(Traits::kFormat);
  SCOPED_TRACE(std::string(info.name));
  EXPECT_EQ(Traits::kQuantDims, info.quantized_dims);
  EXPECT_EQ(Traits::kNumScales, info.num_scales);
  EXPECT_EQ(Traits::kScaleEncoding, info.scale_encoding);
  EXPECT_EQ(Traits::kScalesInRow, info.layout == KvLayout::kTokenInterleaved);
  EXPECT_EQ(Traits::kDataRowBytes, info.data_row_bytes != 0 ? info.data_row_bytes : 2 * d_qk);
  EXPECT_EQ(Traits::kTailOffset, info.tail_offset);
  EXPECT_EQ(Traits::kQuantDims + Traits::kTailDims, d_qk);
  if (Traits::kNumScales > 0) {
    EXPECT_EQ(Traits::kTileSize, info.tile_size);
    if (Traits::kScalesInRow) {
      EXPECT_EQ(Traits::kScaleOffset, info.scale_offset_in_row);
    } else {
      EXPECT_EQ(Traits::kScaleRowBytes, info.scale_row_bytes);
    }
  }
  EXPECT_EQ(kv_cache_bytes_per_token(Traits::kFormat, d_qk),
            Traits::kScalesInRow ? Traits::kDataRowBytes
                                 : Traits::kDataRowBytes + Traits::kScaleRowBytes);
}

// A V4.1 record's device traits (one per format and page layout) against the host table's row.
template <class Traits>
void expect_v41_traits_match() {
  const KvCacheFormatInfo& info = kv_cache_format_info(Traits::kFormat, Traits::kLayout);
  SCOPED_TRACE(std::string(info.name) + " " + kv_layout_name(Traits::kLayout));
  ASSERT_EQ(info.format, Traits::kFormat) << "the host table has no such row";
  EXPECT_EQ(info.layout, Traits::kLayout);
  EXPECT_EQ(Traits::kDqk, info.d_qk);
  EXPECT_EQ(Traits::kRecordBytes, info.bytes_per_token);
  EXPECT_EQ(Traits::kValueEncoding, info.value_encoding);
  EXPECT_EQ(Traits::kQuantDims, info.quantized_dims);
  EXPECT_EQ(Traits::kQuantBytes, info.quantized_bytes);
  EXPECT_EQ(Traits::kTileSize, info.tile_size);
  EXPECT_EQ(Traits::kNumScales, info.num_scales);
  EXPECT_EQ(Traits::kScaleEncoding, info.scale_encoding);
  EXPECT_EQ(Traits::kScaleBytes, info.scale_bytes);
  EXPECT_EQ(Traits::kDataRowBytes, info.data_row_bytes);
  EXPECT_EQ(Traits::kScalesInRow, info.layout == KvLayout::kTokenInterleaved);
  EXPECT_EQ(Traits::kScaleOffset, info.scale_offset_in_row);
  EXPECT_EQ(Traits::kScaleRowBytes, info.scale_row_bytes);
  EXPECT_EQ(Traits::kTailOffset, info.tail_offset);
  EXPECT_EQ(Traits::kQuantDims + Traits::kTailDims, info.d_qk);
  EXPECT_EQ(Traits::kBlockAlignment, info.block_alignment);
  EXPECT_EQ(kv_cache_bytes_per_token(Traits::kFormat, 512), Traits::kRecordBytes);
  // The smallest block stride the kernels' addressing assumes: page_split's data rows then scale
  // rows, rounded up to the alignment; token_interleaved's records back to back.
  for (int64_t pbs : {1, 2, 53, 64, 256}) {
    const int64_t bytes = pbs * Traits::kRecordBytes;
    const int64_t align = Traits::kBlockAlignment;
    EXPECT_EQ(kv_cache_min_block_stride(Traits::kFormat, pbs, 512, Traits::kLayout),
              (bytes + align - 1) / align * align)
        << "page_block_size " << pbs;
  }
}

TEST(PortableDecodeTraits, MatchHostTable) {
  expect_traits_match<cuda::KvTraits<KvCacheFormat::kV32Fp8, 576>>(576);
  expect_traits_match<cuda::KvTraits<KvCacheFormat::kV4Fp8, 512>>(512);
  expect_traits_match<cuda::KvTraits<KvCacheFormat::kBf16, 576>>(576);
  expect_traits_match<cuda::KvTraits<KvCacheFormat::kBf16, 512>>(512);
  expect_v41_traits_match<cuda::V41Traits<KvCacheFormat::kV41Fp8, KvLayout::kPageSplit>>();
  expect_v41_traits_match<cuda::V41Traits<KvCacheFormat::kV41Fp8, KvLayout::kTokenInterleaved>>();
  expect_v41_traits_match<cuda::V41Traits<KvCacheFormat::kV41Fp4, KvLayout::kPageSplit>>();
  expect_v41_traits_match<cuda::V41Traits<KvCacheFormat::kV41Fp4, KvLayout::kTokenInterleaved>>();
}

std::string describe(const verify::DecodeRecipe& r) {
  std::string s =
      std::string(kv_cache_format_name(r.format)) +
      (r.kv_layout != KvLayout::kDefault ? std::string(" ") + kv_layout_name(r.kv_layout)
                                         : std::string()) +
      " b " + std::to_string(r.b) + " s_q " + std::to_string(r.s_q) + " h_q " +
      std::to_string(r.h_q) + " topk " + std::to_string(r.topk) + " page " +
      std::to_string(r.page_block_size);
  if (r.d_qk != 0) s += " d_qk " + std::to_string(r.d_qk);
  if (r.topk_length) s += r.topk_length_per_token ? " topk_length[b,s_q]" : " topk_length[b]";
  if (r.extra_cache) {
    s += " extra";
    if (r.extra_format) s += std::string(" ") + kv_cache_format_name(*r.extra_format);
    if (r.extra_kv_layout != KvLayout::kDefault) {
      s += std::string(" ") + kv_layout_name(r.extra_kv_layout);
    }
    s += " " + std::to_string(r.extra_topk) + " page " + std::to_string(r.extra_page_block_size);
  }
  if (r.shared_indices > 0) s += " shared_indices " + std::to_string(r.shared_indices);
  return s + (r.attn_sink ? " sink" : "") + (r.padded_strides ? " padded" : "");
}

// Device outputs with the host views' strides (padding included).
struct DeviceOutputs {
  Buffer out, lse;
  SparseDecodeArgs args;
};

Status make_device_outputs(const verify::DecodeOutputs& host, const SparseDecodeArgs& inputs,
                           DeviceOutputs* d) {
  SMLA_RETURN_IF_ERROR(test_support::to_device(host.out, &d->out));
  SMLA_RETURN_IF_ERROR(test_support::to_device(host.lse, &d->lse));
  d->args = inputs;
  d->args.out = host.out_view;
  d->args.out.data =
      static_cast<char*>(d->out.data()) + (static_cast<const char*>(host.out_view.data) -
                                           reinterpret_cast<const char*>(host.out.data()));
  d->args.out.device = kGpu;
  d->args.lse = host.lse_view;
  d->args.lse.data =
      static_cast<char*>(d->lse.data()) + (static_cast<const char*>(host.lse_view.data) -
                                           reinterpret_cast<const char*>(host.lse.data()));
  d->args.lse.device = kGpu;
  return {};
}

Status fetch(const DeviceOutputs& d, verify::DecodeOutputs* host) {
  SMLA_RETURN_IF_ERROR(copy_bytes(host->out.data(), Device::cpu(), d.out.data(), kGpu,
                                  host->out.size() * sizeof(uint16_t)));
  return copy_bytes(host->lse.data(), Device::cpu(), d.lse.data(), kGpu,
                    host->lse.size() * sizeof(float));
}

#if defined(SMLA_WITH_CUDA)
// Whether this build has the decode tiles of (format, d_qk) (SMLA_KERNELS, cuda/kernel_registry.h).
bool tiles_built(KvCacheFormat format, int64_t d_qk) {
  return cuda::why_not_built("portable_sparse_decode", format, d_qk) == nullptr;
}

// The shared memory of this build's split-kernel tile (format, d_qk, rows, keys), 0 if not built.
int split_tile_smem(KvCacheFormat format, int64_t d_qk, int rows, int keys) {
  for (const cuda::DecodeEntry& e : cuda::portable_decode_entries()) {
    if (e.tile.format == format && e.tile.d_qk == d_qk && e.tile.rows == rows &&
        e.tile.block_keys == keys && !e.tile.warp_specialized) {
      return e.smem();
    }
  }
  return 0;
}

// The shared memory per block that the tile choice sees: the device's, capped by
// SMLA_DEVICE_SMEM_OPTIN.
int usable_smem() {
  cuda::DeviceLimits limits;
  std::string why;
  EXPECT_TRUE(cuda::device_limits(kGpu.index, &limits, &why)) << why;
  if (const char* cap = std::getenv("SMLA_DEVICE_SMEM_OPTIN")) {
    return std::min(limits.smem_optin, std::atoi(cap));
  }
  return limits.smem_optin;
}

// Whether the case's decode runs over its requests' index unions where the Hopper decode runs it:
// SMLA_DECODE_INDEX_UNION=1 (tests/cpp/CMakeLists.txt: gpu_decode_sm90a_index_union) and a shape
// it fits (cuda::index_union_chosen).
bool index_union_wanted(const verify::DecodeCase& c) {
  const char* knob = std::getenv("SMLA_DECODE_INDEX_UNION");
  return cuda::index_union_chosen(
      c.problem, knob != nullptr && *knob != '\0' ? std::optional(std::atoi(knob)) : std::nullopt);
}

// Whether this build's Hopper decode (kernel_tables.cpp sm90a_decode_entry) is the kernel for
// the case here: a v32_fp8, v4_fp8 or bf16 cache (any head count) on an sm_90 device with its own
// shared memory, where SMLA_DECODE_SM90A=1 turns it on, =0 off, and unset leaves it to the index
// union knob, the head count and the launch's work (cuda::sm90a_decode_by_default;
// tests/cpp/CMakeLists.txt: gpu_decode_sm90a, gpu_decode_portable_on_sm90).
bool hopper_decode_expected(const verify::DecodeCase& c, const DeviceInfo& device) {
  const char* knob = std::getenv("SMLA_DECODE_SM90A");
  const bool wanted =
      knob != nullptr && *knob != '\0'
          ? std::string(knob) == "1"
          : index_union_wanted(c) || cuda::sm90a_decode_by_default(c.problem, device.sm_count);
  return wanted && device.cc_major == 9 && device.cc_minor == 0 &&
         std::getenv("SMLA_DEVICE_SMEM_OPTIN") == nullptr &&
         (c.problem.format == KvCacheFormat::kV32Fp8 || c.problem.format == KvCacheFormat::kV4Fp8 ||
          c.problem.format == KvCacheFormat::kBf16) &&
         cuda::why_not_built("sm90a_sparse_decode", c.problem.format, c.problem.d_qk) == nullptr &&
         !cuda::sm90a_decode_entries().empty() && SMLA_TEST_BUILD_HAS_SM90_CODE;
}
#else  // built without CUDA: no case gets past SMLA_SKIP_WITHOUT_GPU
bool index_union_wanted(const verify::DecodeCase&) { return false; }
bool hopper_decode_expected(const verify::DecodeCase&, const DeviceInfo&) { return false; }
bool tiles_built(KvCacheFormat, int64_t) { return false; }
int split_tile_smem(KvCacheFormat, int64_t, int, int) { return 0; }
int usable_smem() { return 0; }
#endif

// The launch that a plan of a portable decode kernel names, against the knobs that steer it.
void check_portable_launch(const verify::DecodeCase& c, const verify::DecodeRecipe& recipe,
                           const DecodePlan& plan, const DeviceInfo& device) {
  // The plan names the kernel-table row that runs (cuda/kernel_registry.h), of the plan's variant.
  EXPECT_EQ(plan.kernel_family, "portable_sparse_decode");
  EXPECT_EQ(plan.kernel_config.rfind(plan.kernel + "_", 0), 0u) << plan.kernel_config;
  EXPECT_EQ(plan.head_groups, (c.problem.h_q + plan.rows_per_cta - 1) / plan.rows_per_cta);
  // A forced tile (tests/cpp/CMakeLists.txt: gpu_decode_tiles_k*) must be the one that runs, or
  // not fit the shared memory (an A100 for 64 rows x 64 keys, or an SMLA_DEVICE_SMEM_OPTIN cap:
  // gpu_tiles_of_*, gpu_check.sh's sm80 mode). Every tile fits an sm_90 device's own 227 KiB
  // (tile_choice_test.cpp), so there the forced count always runs.
  if (const char* keys = std::getenv("SMLA_DECODE_BLOCK_KEYS")) {
    const int forced = std::atoi(keys);
    if (plan.keys_per_block != forced) {
      EXPECT_GT(split_tile_smem(c.problem.format, c.problem.d_qk, plan.rows_per_cta, forced),
                usable_smem())
          << plan.reason;
    }
    if (device.cc_major == 9 && std::getenv("SMLA_DEVICE_SMEM_OPTIN") == nullptr) {
      EXPECT_EQ(plan.keys_per_block, forced) << plan.reason;
    }
  }
  // Paired head groups (decode_launch_policy.cpp): 65..128 heads of a quantized cache in two
  // 64-row head groups, where the loaded code is sm_90's; SMLA_DECODE_PAIR_HEAD_GROUPS
  // (tests/cpp/CMakeLists.txt: gpu_decode_pairing_*) forces it off / on. The launch that the plan
  // names must be the expected one. A build without sm_90 code (gpu_check.sh's sm80 mode:
  // compute_80 PTX) runs unpaired on sm_90 too.
  const char* pair_env = std::getenv("SMLA_DECODE_PAIR_HEAD_GROUPS");
  const bool pair_wanted = pair_env == nullptr || std::string(pair_env) != "0";
  const bool two_wide_groups = plan.head_groups == 2 && plan.rows_per_cta == 64;
  // The V4.1 split kernels have no paired path.
  const bool v41 =
      recipe.format == KvCacheFormat::kV41Fp8 || recipe.format == KvCacheFormat::kV41Fp4;
  const bool may_pair =
      recipe.format != KvCacheFormat::kBf16 && !v41 && two_wide_groups && pair_wanted;
  if (!may_pair) EXPECT_FALSE(plan.paired_head_groups) << plan.reason;
  if (may_pair && device.cc_major == 9 && SMLA_TEST_BUILD_HAS_SM90_CODE) {
    EXPECT_TRUE(plan.paired_head_groups) << plan.reason;
  }
  // The 16-row x 32-key tile of an FP8 cache runs the warp-specialised kernel unless
  // SMLA_DECODE_WARP_SPECIALIZED=0 (tests/cpp/CMakeLists.txt: gpu_decode_split_16_rows), its
  // shared memory does not fit (v32_fp8 under the A100's cap) or its parts do not fit one wave
  // (decode_launch_policy.cpp choose_decode_tile, choose_decode_launch). On an sm_90 device's own
  // 227 KiB it fits, and up to 132 parts are one wave of the H200.
  const char* producers_env = std::getenv("SMLA_DECODE_WARP_SPECIALIZED");
  const bool producers_wanted = producers_env == nullptr || std::string(producers_env) != "0";
  const bool tile_16x32 = plan.rows_per_cta == 16 && plan.keys_per_block == 32;
  const bool may_produce = producers_wanted && tile_16x32 && recipe.format != KvCacheFormat::kBf16;
  if (!may_produce) EXPECT_FALSE(plan.warp_specialized) << plan.reason;
  if (may_produce && device.cc_major == 9 && std::getenv("SMLA_DEVICE_SMEM_OPTIN") == nullptr &&
      plan.num_sm_parts <= device.sm_count) {
    EXPECT_TRUE(plan.warp_specialized) << plan.reason;
  }
}

// Plans, runs layer 0 (kBuild) and layer 1 (kReuse) into separate outputs, checks both.
void check_case(const verify::DecodeRecipe& recipe) {
  SCOPED_TRACE(describe(recipe));
  verify::DecodeCase c;
  SMLA_ASSERT_OK(verify::make_decode_case(recipe, &c));
  if (!tiles_built(c.problem.format, c.problem.d_qk)) {
    GTEST_SKIP() << "not in this build (SMLA_KERNELS)";
  }
  verify::DeviceDecodeInputs inputs;
  SMLA_ASSERT_OK(verify::upload(c, kGpu, &inputs));

  verify::DecodeOutputs got0, got1, expected;
  verify::allocate_outputs(c.problem, &got0, recipe.padded_strides);
  verify::allocate_outputs(c.problem, &got1, recipe.padded_strides);
  DeviceOutputs d0, d1;
  SMLA_ASSERT_OK(make_device_outputs(got0, inputs.args_template, &d0));
  SMLA_ASSERT_OK(make_device_outputs(got1, inputs.args_template, &d1));

  RunOptions options;
  options.backend = Backend::kCuda;
  SparseDecodeProblem problem;
  SMLA_ASSERT_OK(describe_sparse_decode(d0.args, &problem));
  DecodePlan plan;
  SMLA_ASSERT_OK(plan_sparse_decode(problem, &plan, options));
  DeviceInfo device;
  SMLA_ASSERT_OK(get_device_info(kGpu.index, &device));
  const bool hopper_wanted = hopper_decode_expected(c, device);
  if (plan.kernel == "sm90a_sparse_decode") {
    EXPECT_TRUE(hopper_wanted) << plan.reason;
    EXPECT_EQ(plan.kernel_family, "sm90a_sparse_decode");
    EXPECT_EQ(plan.rows_per_cta, 64);
    EXPECT_EQ(plan.keys_per_block, 64);
    EXPECT_EQ(plan.head_groups, (c.problem.h_q + 63) / 64);
    EXPECT_FALSE(plan.paired_head_groups) << plan.reason;
    EXPECT_EQ(plan.index_union, index_union_wanted(c)) << plan.reason;
  } else {
    EXPECT_FALSE(hopper_wanted) << plan.kernel << ": " << plan.reason;
    EXPECT_FALSE(plan.index_union) << plan.reason;
    ASSERT_EQ(plan.kernel.rfind("portable_sparse_decode", 0), 0u) << plan.kernel;
    check_portable_launch(c, recipe, plan, device);
  }
  Buffer workspace;
  SMLA_ASSERT_OK(Buffer::allocate(kGpu, plan.workspace_bytes + 8, &workspace));
  if (plan.workspace_bytes > 0) {  // refused before any launch, not a misaligned-address fault
    const Status s = sparse_decode(d0.args, plan, static_cast<uint8_t*>(workspace.data()) + 8,
                                   plan.workspace_bytes, DecodeSchedule::kBuild, options);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find("is not aligned to 16 bytes"), std::string::npos) << s.message();
  }
  SMLA_ASSERT_OK(sparse_decode(d0.args, plan, workspace.data(), plan.workspace_bytes,
                               DecodeSchedule::kBuild, options));
  SMLA_ASSERT_OK(sparse_decode(d1.args, plan, workspace.data(), plan.workspace_bytes,
                               DecodeSchedule::kReuse, options));
  SMLA_ASSERT_OK(synchronize(kGpu));
  SMLA_ASSERT_OK(fetch(d0, &got0));
  SMLA_ASSERT_OK(fetch(d1, &got1));

  SMLA_ASSERT_OK(verify::run_reference(c, &expected));
  const verify::CheckReport r0 = verify::check_decode(got0, expected);
  EXPECT_TRUE(r0.ok) << plan.kernel << " kBuild (" << plan.reason << "):\n" << r0.message;
  const verify::CheckReport r1 = verify::check_decode(got1, expected);
  EXPECT_TRUE(r1.ok) << plan.kernel << " kReuse:\n" << r1.message;
}

struct FormatCase {
  KvCacheFormat format;
  int d_qk;  // 0 = the format's own
  const char* name;
};
// Names the case in test listings (ctest shows the parameter next to the test name).
void PrintTo(const FormatCase& c, std::ostream* os) { *os << c.name; }

class PortableDecode : public ::testing::TestWithParam<FormatCase> {
 protected:
  verify::DecodeRecipe base() const {
    verify::DecodeRecipe r;
    r.format = GetParam().format;
    r.d_qk = GetParam().d_qk;
    return r;
  }
};

// Every head tile with full and partial head groups (24 in a 32-row tile, 100 = a full and a
// partial 64-row group); MTP token counts.
TEST_P(PortableDecode, HeadCountsAndTokens) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {1, 8, 16, 24, 32, 64, 100, 128}) {
    for (int64_t s_q : {1, 3}) {
      verify::DecodeRecipe r = base();
      r.b = 3;
      r.s_q = s_q;
      r.h_q = h_q;
      r.topk = 100;
      r.topk_length_per_token = s_q > 1;
      r.seed = 10 * h_q + s_q;
      check_case(r);
    }
  }
}

// Extra cache with its own page size; odd page sizes; topk_length shapes; s_q up to 8; 16, 64 and
// 128 heads.
TEST_P(PortableDecode, ExtraCacheAndPages) {
  SMLA_SKIP_WITHOUT_GPU();
  struct Pages {
    int64_t main, extra, topk, extra_topk, s_q;
  };
  for (Pages pg : {Pages{1, 2, 37, 64, 1}, Pages{53, 61, 64, 130, 2}, Pages{64, 69, 128, 512, 4},
                   Pages{576, 1, 1, 100, 8}}) {
    verify::DecodeRecipe r = base();
    r.b = 4;
    r.s_q = pg.s_q;
    r.h_q = 64;
    r.topk = pg.topk;
    r.page_block_size = pg.main;
    r.extra_cache = true;
    r.extra_topk = pg.extra_topk;
    r.extra_page_block_size = pg.extra;
    r.topk_length_per_token = pg.s_q % 2 == 0;
    r.extra_topk_length_per_token = pg.s_q % 4 == 0;
    r.seed = pg.main + pg.extra;
    check_case(r);
    if (pg.s_q <= 2) {  // 128 heads: on sm_90 the two head groups share blocks (paired CTAs)
      verify::DecodeRecipe wide = r;
      wide.h_q = 128;
      check_case(wide);
    }
    r.h_q = 16;
    r.extra_topk_length = false;
    r.topk_length = false;
    r.attn_sink = false;
    r.padded_strides = false;
    check_case(r);
  }
}

// Draft tokens sharing 50-90 % of their request's indices (MTP verification), with an extra
// cache, at 16 and 64 heads.
TEST_P(PortableDecode, DraftTokensShareIndices) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {16, 64}) {
    for (int64_t s_q : {2, 4}) {
      for (double shared : {0.5, 0.9}) {
        verify::DecodeRecipe r = base();
        r.b = 5;
        r.s_q = s_q;
        r.h_q = h_q;
        r.topk = 192;
        r.topk_length_per_token = true;
        r.extra_cache = true;
        r.extra_topk = 128;
        r.extra_page_block_size = 64;
        r.shared_indices = shared;
        r.seed = 1000 * s_q + h_q + static_cast<uint64_t>(shared * 10);
        check_case(r);
      }
    }
  }
}

// The index union's shapes (run over the unions by gpu_decode_sm90a_index_union, over the tokens'
// own lists elsewhere): 2..8 tokens whose heads fill part or all of the 64-row tile, lists sharing
// 0-100 % of their entries, caches of few slots (entries repeated within a list and across
// lists), long lists (split pieces) and short requests.
TEST_P(PortableDecode, DraftTokensOfOneTile) {
  SMLA_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t b, s_q, h_q, topk;
    double shared;
    int64_t num_blocks;  // 0: the recipe's (~2x the listed slots)
    bool extra;
  };
  for (const Shape& sh :
       {Shape{3, 2, 32, 192, 0.9, 0, true}, Shape{4, 3, 16, 100, 0.5, 0, false},
        Shape{2, 4, 16, 256, 1.0, 0, true}, Shape{3, 8, 8, 64, 0.7, 0, true},
        Shape{5, 2, 8, 130, 0.0, 0, false}, Shape{2, 4, 1, 96, 0.9, 2, true},
        Shape{2, 2, 24, 2048, 0.8, 0, false}, Shape{1, 2, 32, 600, 0.6, 3, false}}) {
    verify::DecodeRecipe r = base();
    r.b = sh.b;
    r.s_q = sh.s_q;
    r.h_q = sh.h_q;
    r.topk = sh.topk;
    r.topk_length_per_token = sh.s_q % 2 == 0;
    r.shared_indices = sh.shared;
    r.num_blocks = sh.num_blocks;
    r.extra_cache = sh.extra;
    r.extra_topk = 80;
    r.extra_page_block_size = 16;
    r.extra_topk_length_per_token = sh.s_q > 2;
    r.seed = 7000 + 100 * sh.s_q + sh.h_q;
    check_case(r);
  }
}

// Many requests (and zero-length ones): a schedule with several queries per part.
TEST_P(PortableDecode, ManyRequests) {
  SMLA_SKIP_WITHOUT_GPU();
  verify::DecodeRecipe r = base();
  r.b = 321;
  r.s_q = 1;
  r.h_q = 16;
  r.topk = 64;
  r.extra_cache = true;
  r.extra_topk = 64;
  r.extra_page_block_size = 64;
  r.seed = 321;
  check_case(r);
}

// Full lists (no lengths tensors) of a query per resident slot or more: where whole queries per
// part cost nothing by the part-count rule the schedule splits no query and no combine is
// launched (decode_part_count.h, kernel_tables.cpp run_split_decode); invalid entries and empty
// queries still fill their lists' blocks. 72 heads (two 64-row head groups: 66 slots each on the
// H200), 64 heads, 16 heads (the register-Q tile's two CTAs per SM) and an extra cache.
TEST_P(PortableDecode, FullListsOfManyQueries) {
  SMLA_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t b, s_q, h_q, topk, extra_topk;
  };
  for (const Shape& sh :
       {Shape{140, 2, 72, 64, 0}, Shape{150, 1, 64, 48, 96}, Shape{100, 3, 16, 64, 32}}) {
    verify::DecodeRecipe r = base();
    r.b = sh.b;
    r.s_q = sh.s_q;
    r.h_q = sh.h_q;
    r.topk = sh.topk;
    r.topk_length = false;
    r.extra_cache = sh.extra_topk > 0;
    r.extra_topk = sh.extra_topk;
    r.extra_topk_length = false;
    r.extra_page_block_size = 64;
    r.seed = 9000 + sh.h_q;
    check_case(r);
  }
}

// Long lists over few queries: every query split across many parts (combine path).
TEST_P(PortableDecode, LongListsSplit) {
  SMLA_SKIP_WITHOUT_GPU();
  verify::DecodeRecipe r = base();
  r.b = 2;
  r.s_q = 2;
  r.h_q = 128;
  r.topk = 2048;
  r.empty_queries = false;
  r.seed = 2048;
  check_case(r);
}

// Few queries of short lists on one-CTA-per-SM tiles (32 and 64 heads, and 128 paired): the part
// count follows the lists' bound and parts have a floor of units (planning/decode_part_count.h),
// with valid lengths shorter than the bound (topk_length, empty queries), so parts past the work
// stay empty. V4's lists (512 + 128 slots) at b = 64 (36 heads: the 64-row tile) and b = 12, and
// V3.2's 2048 at b = 2, s_q = 2.
TEST_P(PortableDecode, PartsSizedForFullLists) {
  SMLA_SKIP_WITHOUT_GPU();
  DeviceInfo device;
  SMLA_ASSERT_OK(get_device_info(kGpu.index, &device));
  struct Shape {
    int64_t b, s_q, h_q, topk, extra_topk;
  };
  for (Shape sh : {Shape{64, 1, 36, 512, 128}, Shape{12, 1, 32, 512, 128},
                   Shape{2, 2, 128, 2048, 0}, Shape{64, 1, 16, 512, 128}}) {
    verify::DecodeRecipe r = base();
    r.b = sh.b;
    r.s_q = sh.s_q;
    r.h_q = sh.h_q;
    r.topk = sh.topk;
    r.extra_cache = sh.extra_topk > 0;
    r.extra_topk = sh.extra_topk;
    r.extra_page_block_size = 256;
    r.seed = 7 * sh.b + sh.h_q;
    check_case(r);
    // Full lists too (no topk_length, no empty queries): every part holds what the rule laid out.
    r.topk_length = false;
    r.extra_topk_length = false;
    r.empty_queries = false;
    check_case(r);
    // On the H200 (132 SMs; one 64-key tile per SM, or two 16-row register-Q tiles; its own tiles
    // and sm_90 code) the rule picks floors for these shapes (decode_part_count_test.cpp); other
    // devices may keep the plain count.
    if (device.sm_count == 132 && device.cc_major == 9 && r.format != KvCacheFormat::kBf16 &&
        std::getenv("SMLA_DECODE_NUM_PARTS") == nullptr &&
        std::getenv("SMLA_DECODE_BLOCK_KEYS") == nullptr &&
        std::getenv("SMLA_DECODE_PAIR_HEAD_GROUPS") == nullptr &&
        std::getenv("SMLA_DEVICE_SMEM_OPTIN") == nullptr && SMLA_TEST_BUILD_HAS_SM90_CODE) {
      verify::DecodeCase c;
      SMLA_ASSERT_OK(verify::make_decode_case(r, &c));
      SparseDecodeProblem problem = c.problem;
      problem.device = kGpu;
      RunOptions options;
      options.backend = Backend::kCuda;
      DecodePlan plan;
      SMLA_ASSERT_OK(plan_sparse_decode(problem, &plan, options));
      EXPECT_GT(plan.min_units_per_part, 0) << plan.reason;
    }
  }
}

// A cache past 2^31 bytes (2.25 GiB of 64-token pages, whatever the format's block stride):
// page * block_stride and slot offsets must be 64-bit in the kernels. The indices are drawn
// over all slots, so most rows live past the 2 GiB mark. 16 heads (compact tile) and 128 heads.
TEST_P(PortableDecode, CacheBeyondTwoGigabytes) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {16, 128}) {
    verify::DecodeRecipe r = base();
    r.b = 2;
    r.s_q = 2;
    r.h_q = h_q;
    r.topk = 256;
    const int d_qk = r.d_qk != 0 ? r.d_qk : kv_cache_format_info(r.format).d_qk;
    r.num_blocks = (int64_t{9} << 28) / kv_cache_min_block_stride(r.format, 64, d_qk) + 1;
    r.seed = 2048 + h_q;
    check_case(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, PortableDecode,
                         ::testing::Values(FormatCase{KvCacheFormat::kV32Fp8, 0, "v32_fp8"},
                                           FormatCase{KvCacheFormat::kV4Fp8, 0, "v4_fp8"},
                                           FormatCase{KvCacheFormat::kBf16, 576, "bf16_d576"},
                                           FormatCase{KvCacheFormat::kBf16, 512, "bf16_d512"}),
                         [](const ::testing::TestParamInfo<FormatCase>& info) {
                           return info.param.name;
                         });

// ---- DeepSeek V4.1 ------------------------------------------------------------------------

// A v41_fp8 (or v41_fp4) main cache in one page layout, with no extra cache or a v41_fp8 /
// v41_fp4 one in either layout (SPEC §3: each cache its own page size).
struct V41Case {
  KvLayout layout;
  bool extra;
  KvCacheFormat extra_format;
  KvLayout extra_layout;
  const char* name;
  KvCacheFormat main_format = KvCacheFormat::kV41Fp8;
};
void PrintTo(const V41Case& c, std::ostream* os) { *os << c.name; }

class V41Decode : public ::testing::TestWithParam<V41Case> {
 protected:
  verify::DecodeRecipe base() const {
    const V41Case& c = GetParam();
    verify::DecodeRecipe r;
    r.format = c.main_format;
    r.kv_layout = c.layout;
    r.extra_cache = c.extra;
    if (c.extra) {
      r.extra_format = c.extra_format;
      r.extra_kv_layout = c.extra_layout;
    }
    // V4.1's shapes: window page 256 + compressed page 64, window list 128 + drafts padded (192).
    r.page_block_size = 256;
    r.extra_page_block_size = 64;
    r.topk = 192;
    r.extra_topk = 512;
    return r;
  }
};

// 8 / 16 / 64 / 128 heads (every tile, 128 = two 64-row head groups) x s_q 1 + drafts (draft
// verification: 1, 2, 4, 6 tokens, topk_length per token); then partial head groups (1, 24, 100
// heads) at 3 and 8 tokens.
TEST_P(V41Decode, HeadCountsAndDraftTokens) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {1, 8, 16, 24, 64, 100, 128}) {
    const bool tp_shard = h_q == 8 || h_q == 16 || h_q == 64 || h_q == 128;
    for (int64_t s_q : tp_shard ? std::vector<int64_t>{1, 2, 4, 6} : std::vector<int64_t>{3, 8}) {
      verify::DecodeRecipe r = base();
      r.b = 2;
      r.s_q = s_q;
      r.h_q = h_q;
      r.topk_length_per_token = s_q > 1;
      r.extra_topk_length_per_token = s_q > 2;
      r.seed = 100 * h_q + s_q;
      check_case(r);
    }
  }
}

// Odd page sizes of each cache (1, 2, 53, 61, 69, 576), topk not a multiple of the block, sinks
// and padded strides (the recipe's defaults), invalid indices and NaN-poisoned rows.
TEST_P(V41Decode, OddPagesAndShortLists) {
  SMLA_SKIP_WITHOUT_GPU();
  struct Pages {
    int64_t main, extra, topk, extra_topk, h_q;
  };
  for (Pages pg : {Pages{1, 2, 37, 64, 16}, Pages{53, 61, 64, 130, 64}, Pages{69, 576, 100, 37, 8},
                   Pages{576, 1, 1, 100, 128}}) {
    verify::DecodeRecipe r = base();
    r.b = 3;
    r.s_q = 2;
    r.h_q = pg.h_q;
    r.page_block_size = pg.main;
    r.extra_page_block_size = pg.extra;
    r.topk = pg.topk;
    r.extra_topk = pg.extra_topk;
    r.topk_length_per_token = true;
    r.seed = pg.main * 7 + pg.extra;
    check_case(r);
    r.topk_length = false;
    r.extra_topk_length = false;
    r.attn_sink = false;
    r.padded_strides = false;
    check_case(r);
  }
}

// Draft tokens sharing 50-90 % of their request's indices in both caches (V4.1's s_q 1 + drafts).
TEST_P(V41Decode, DraftTokensShareIndices) {
  SMLA_SKIP_WITHOUT_GPU();
  for (int64_t h_q : {16, 64}) {
    for (double shared : {0.5, 0.9}) {
      verify::DecodeRecipe r = base();
      r.b = 3;
      r.s_q = 4;
      r.h_q = h_q;
      r.topk_length_per_token = true;
      r.extra_topk_length_per_token = true;
      r.shared_indices = shared;
      r.seed = 4000 + h_q + static_cast<uint64_t>(shared * 10);
      check_case(r);
    }
  }
}

// Long lists over few queries (every query split across parts, the combine path) and many
// requests (several queries per part, zero-length ones).
TEST_P(V41Decode, SplitQueriesAndManyRequests) {
  SMLA_SKIP_WITHOUT_GPU();
  verify::DecodeRecipe r = base();
  r.b = 2;
  r.s_q = 1;
  r.h_q = 64;
  r.topk = 1024;
  r.extra_topk = 2048;
  r.empty_queries = false;
  r.seed = 2048;
  check_case(r);
  r = base();
  r.b = 129;
  r.s_q = 1;
  r.h_q = 16;
  r.topk = 128;
  r.extra_topk = 64;
  r.seed = 129;
  check_case(r);
}

// Main and extra caches past 2^31 bytes (64-token pages): 64-bit page offsets in both records'
// addressing. Only for the fp4-extra pairs of one layout (each case holds ~4.5 GiB).
TEST_P(V41Decode, CachesBeyondTwoGigabytes) {
  SMLA_SKIP_WITHOUT_GPU();
  const V41Case& c = GetParam();
  if (!c.extra || c.extra_format != KvCacheFormat::kV41Fp4 || c.layout != c.extra_layout) {
    GTEST_SKIP() << "run for the v41_fp4-extra pairs of one layout only";
  }
  verify::DecodeRecipe r = base();
  r.b = 2;
  r.s_q = 2;
  r.h_q = 64;
  r.topk = 256;
  r.extra_topk = 256;
  r.page_block_size = 64;
  r.extra_page_block_size = 64;
  r.num_blocks =
      (int64_t{9} << 28) / kv_cache_min_block_stride(c.main_format, 64, 512, c.layout) + 1;
  r.extra_num_blocks =
      (int64_t{9} << 28) / kv_cache_min_block_stride(KvCacheFormat::kV41Fp4, 64, 512, c.layout) + 1;
  r.seed = 4096;
  check_case(r);
}

INSTANTIATE_TEST_SUITE_P(
    Caches, V41Decode,
    ::testing::Values(V41Case{KvLayout::kPageSplit, false, KvCacheFormat::kV41Fp8,
                              KvLayout::kDefault, "page_split"},
                      V41Case{KvLayout::kTokenInterleaved, false, KvCacheFormat::kV41Fp8,
                              KvLayout::kDefault, "token_interleaved"},
                      V41Case{KvLayout::kPageSplit, true, KvCacheFormat::kV41Fp4,
                              KvLayout::kPageSplit, "page_split_fp4_page_split"},
                      V41Case{KvLayout::kPageSplit, true, KvCacheFormat::kV41Fp4,
                              KvLayout::kTokenInterleaved, "page_split_fp4_token_interleaved"},
                      V41Case{KvLayout::kTokenInterleaved, true, KvCacheFormat::kV41Fp4,
                              KvLayout::kPageSplit, "token_interleaved_fp4_page_split"},
                      V41Case{KvLayout::kTokenInterleaved, true, KvCacheFormat::kV41Fp4,
                              KvLayout::kTokenInterleaved,
                              "token_interleaved_fp4_token_interleaved"},
                      V41Case{KvLayout::kPageSplit, true, KvCacheFormat::kV41Fp8,
                              KvLayout::kTokenInterleaved, "page_split_fp8_token_interleaved"},
                      V41Case{KvLayout::kTokenInterleaved, true, KvCacheFormat::kV41Fp8,
                              KvLayout::kPageSplit, "token_interleaved_fp8_page_split"},
                      // A v41_fp4 main cache (alone, or with a v41_fp4 extra cache: the rule of
                      // kv_cache_format.cpp).
                      V41Case{KvLayout::kPageSplit, false, KvCacheFormat::kV41Fp8,
                              KvLayout::kDefault, "fp4_main_page_split", KvCacheFormat::kV41Fp4},
                      V41Case{KvLayout::kTokenInterleaved, true, KvCacheFormat::kV41Fp4,
                              KvLayout::kPageSplit, "fp4_main_token_interleaved_fp4_page_split",
                              KvCacheFormat::kV41Fp4}),
    [](const ::testing::TestParamInfo<V41Case>& info) { return info.param.name; });

}  // namespace
}  // namespace sparse_mla
