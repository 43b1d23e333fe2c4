// The classes of bad input that used to be accepted and give garbage (docs/rejected_input.md):
// outputs that alias an input, another output or themselves; negative thread counts; plans
// edited after planning; cache views whose block stride cannot hold their page; problems that
// `list` used to judge although planning refuses them. Each is refused with kInvalidArgument, a
// message naming the argument and the value, and the outputs left as they were.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sparse_mla/sparse_mla.h"
#include "support/call_fixtures.h"

namespace sparse_mla {
namespace {

using test_support::DecodeFixture;
using test_support::PrefillFixture;

void expect_refused(const Status& s, const std::string& expected) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find(expected), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << expected;
}

// A plan for the fixture's call on the CPU back end, and a workspace for it.
struct PlannedDecode {
  DecodeFixture f;
  SparseDecodeArgs args = f.args();
  RunOptions options;
  DecodePlan plan;
  std::vector<uint8_t> workspace;

  PlannedDecode() {
    options.backend = Backend::kCpu;
    SparseDecodeProblem problem;
    EXPECT_TRUE(describe_sparse_decode(args, &problem).ok());
    EXPECT_TRUE(plan_sparse_decode(problem, &plan, options).ok());
    workspace.resize(plan.workspace_bytes + 16);
  }
  Status run(const SparseDecodeArgs& a, const DecodePlan& p) {
    return sparse_decode(a, p, workspace.data(), workspace.size(), DecodeSchedule::kBuild, options);
  }
};

// ---- aliasing ----------------------------------------------------------------------------------

TEST(BadInput, PrefillOutputAliasingAnInputIsRefused) {
  PrefillFixture f;
  SparsePrefillArgs a = f.args();
  a.out.data = f.q.data();  // q holds s_q*h_q*576 bf16, more than out's s_q*h_q*512
  expect_refused(sparse_prefill(a), "out (bytes [");
  expect_refused(sparse_prefill(a), ") overlaps input q (bytes [");
  EXPECT_TRUE(f.outputs_untouched());

  a = f.args();
  a.lse.data = f.indices.data();  // s_q*h_q fp32 inside s_q*topk int32
  expect_refused(sparse_prefill(a), "lse (bytes [");
  expect_refused(sparse_prefill(a), "overlaps input indices");
  EXPECT_TRUE(f.outputs_untouched());
}

TEST(BadInput, PrefillOutputsAliasingEachOtherAreRefused) {
  PrefillFixture f;
  SparsePrefillArgs a = f.args();
  a.lse.data = f.max_logits.data();
  expect_refused(sparse_prefill(a), "lse (bytes [");
  expect_refused(sparse_prefill(a), "overlaps output max_logits");
  EXPECT_TRUE(f.outputs_untouched());
}

TEST(BadInput, DecodeOutputAliasingAnInputIsRefused) {
  PlannedDecode d;
  SparseDecodeArgs a = d.args;
  a.out.data = d.f.q.data();  // q [2,2,8,512] bf16 and out [2,2,8,512] bf16: the same bytes
  expect_refused(d.run(a, d.plan), "overlaps input q");
  a = d.args;
  a.lse.data = const_cast<void*>(a.kv_cache.data);
  expect_refused(d.run(a, d.plan), "lse (bytes [");
  expect_refused(d.run(a, d.plan), "overlaps input kv_cache");
  a = d.args;
  a.out.data = const_cast<void*>(a.extra_kv_cache->data);
  expect_refused(d.run(a, d.plan), "overlaps input extra_kv_cache");
  a = d.args;
  a.lse.data = a.out.data;
  expect_refused(d.run(a, d.plan), "lse (bytes [");
  expect_refused(d.run(a, d.plan), "overlaps output out");
  EXPECT_TRUE(d.f.outputs_untouched());
}

TEST(BadInput, OutputsNextToEachOtherInOneBufferAreAccepted) {
  // Slices of one allocation that do not overlap are fine: out, then lse right after it.
  PlannedDecode d;
  const size_t out_elems = d.f.out.size();
  std::vector<uint16_t> both(out_elems + 2 * d.f.lse.size(), 0);
  SparseDecodeArgs a = d.args;
  a.out.data = both.data();
  a.lse.data = both.data() + out_elems;
  const Status s = d.run(a, d.plan);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ---- outputs overlapping themselves
// --------------------------------------------------------------

TEST(BadInput, OutputsOverlappingThemselvesAreRefused) {
  PrefillFixture f;
  SparsePrefillArgs a = f.args();
  a.out.strides[1] = 256;  // heads 256 elements apart, rows of 512: head h+1 overwrites h
  expect_refused(sparse_prefill(a),
                 "out ([3, 4, 512] bf16 strides [2048, 256, 1] cpu) overlaps "
                 "itself");
  a = f.args();
  a.lse.strides = {1, 1, 0, 0};  // [s_q, h_q] with both strides 1
  expect_refused(sparse_prefill(a), "lse (");
  expect_refused(sparse_prefill(a), "overlaps itself");
  EXPECT_TRUE(f.outputs_untouched());

  PlannedDecode d;
  SparseDecodeArgs bad = d.args;
  bad.lse.strides = {8, 8, 1, 0};  // b and s_q rows on top of each other
  expect_refused(d.run(bad, d.plan), "lse (");
  expect_refused(d.run(bad, d.plan), "overlaps itself");
  EXPECT_TRUE(d.f.outputs_untouched());
}

TEST(BadInput, PermutedOutputsAreAccepted) {
  // lse as a transposed view ([s_q, h_q] with strides [1, s_q]): distinct elements.
  PrefillFixture f;
  SparsePrefillArgs a = f.args();
  a.lse.strides = {1, PrefillFixture::s_q, 0, 0};
  const Status s = sparse_prefill(a);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ---- run options
// ---------------------------------------------------------------------------------

TEST(BadInput, NegativeThreadCountsAreRefused) {
  PrefillFixture f;
  RunOptions options;
  options.num_threads = -5;
  expect_refused(sparse_prefill(f.args(), options),
                 "sparse_prefill: options.num_threads = -5 must be >= 0 (0 = every hardware "
                 "thread)");
  EXPECT_TRUE(f.outputs_untouched());

  PlannedDecode d;
  SparseDecodeProblem problem = d.plan.problem;
  DecodePlan plan;
  expect_refused(plan_sparse_decode(problem, &plan, options),
                 "plan_sparse_decode: options.num_threads = -5");
  d.options.num_threads = -1;
  expect_refused(d.run(d.args, d.plan), "sparse_decode: options.num_threads = -1");
  EXPECT_TRUE(d.f.outputs_untouched());
}

TEST(BadInput, UnknownBackEndsAreRefused) {
  PrefillFixture f;
  RunOptions options;
  options.backend = static_cast<Backend>(7);
  expect_refused(sparse_prefill(f.args(), options), "options.backend = 7 is not a back end");
}

// ---- plans edited after planning
// -------------------------------------------------------------------

TEST(BadInput, EditedPlansAreRefused) {
  PlannedDecode d;
  const std::string expected = "sparse_decode: the plan was not made by plan_sparse_decode";
  DecodePlan p = d.plan;
  p.num_sm_parts += 1;
  expect_refused(d.run(d.args, p), expected);
  p = d.plan;
  p.workspace_bytes += 64;
  expect_refused(d.run(d.args, p), expected);
  p = d.plan;
  p.kernel = "reference_sparse_decode";
  expect_refused(d.run(d.args, p), expected);
  p = d.plan;
  p.backend = Backend::kReference;
  expect_refused(d.run(d.args, p), expected);
  // A plan never made by plan_sparse_decode, however plausible its fields.
  DecodePlan hand_made;
  hand_made.problem = d.plan.problem;
  hand_made.backend = d.plan.backend;
  hand_made.kernel = d.plan.kernel;
  expect_refused(d.run(d.args, hand_made), expected);
  EXPECT_TRUE(d.f.outputs_untouched());
}

TEST(BadInput, EditedPlanProblemsAreRefused) {
  // The problem edited to match other arguments: the arguments agree with plan.problem, the
  // fingerprint does not.
  PlannedDecode d;
  SparseDecodeArgs a = d.args;
  a.attn_sink.reset();
  DecodePlan p = d.plan;
  p.problem.has_attn_sink = false;
  expect_refused(d.run(a, p), "the plan was not made by plan_sparse_decode");
  EXPECT_TRUE(d.f.outputs_untouched());
}

TEST(BadInput, CopiedPlansAndEditedReasonsRun) {
  PlannedDecode d;
  DecodePlan copy = d.plan;
  copy.reason = "edited: free text for logs";
  const Status s = d.run(d.args, copy);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ---- cache views that cannot hold their page
// ---------------------------------------------------------

TEST(BadInput, CacheViewsWhoseBlockCannotHoldThePageAreRefused) {
  // A v4_fp8 view claiming 64-token pages over blocks of 32 (the stride of a 32-token block):
  // the scales of token 32.. would be read from the next block.
  DecodeFixture f;
  SparseDecodeArgs a = f.args();
  a.kv_cache.page_block_size = DecodeFixture::page + 1;
  SparseDecodeProblem problem;
  const Status s = describe_sparse_decode(a, &problem);
  expect_refused(s, "kv_cache.block_stride_bytes = " + std::to_string(f.block_stride) +
                        " is smaller than the minimum");
  // A stride that is not a multiple of the v4 block alignment (576).
  a = f.args();
  a.kv_cache.block_stride_bytes += 16;
  expect_refused(describe_sparse_decode(a, &problem), "is not a multiple of 576");
}

// ---- problems `list` judges
// ------------------------------------------------------------------------

TEST(BadInput, ListingsJudgeOnlyValidProblems) {
  PlannedDecode d;
  SparseDecodeProblem problem = d.plan.problem;
  problem.s_q = 0;
  EXPECT_EQ(validate_problem(problem).code(), StatusCode::kInvalidArgument);
  for (const KernelAvailability& k : list_decode_kernels(problem)) {
    EXPECT_FALSE(k.usable) << k.name;
    EXPECT_NE(k.why_not.find("invalid problem: plan_sparse_decode: problem.s_q = 0"),
              std::string::npos)
        << k.why_not;
  }
  SparsePrefillProblem prefill{0, 64, 16, 512, 512, 64, false, false, Device::cpu()};
  EXPECT_TRUE(validate_problem(prefill).ok());  // s_q = 0 is an empty prefill call
  prefill.d_qk = 500;
  const Status bad = validate_problem(prefill);
  expect_refused(bad, "sparse_prefill: problem.d_qk = 500 must be 512 or 576");
  for (const KernelAvailability& k : list_prefill_kernels(prefill)) EXPECT_FALSE(k.usable);
}

}  // namespace
}  // namespace sparse_mla
