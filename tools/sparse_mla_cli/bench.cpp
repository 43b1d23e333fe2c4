// `sparse-mla bench`: runs benchmark suites (suites.h) or one case given by flags on a back end,
// verifies every case against the reference, and prints time, FLOP/s, bytes/s, the two floors
// (FLOPs / peak, bytes / bandwidth), the share of the ceiling and the ratio to FlashMLA's anchor;
// `--json FILE` records every number with the command line, commit and machine.
// Timing follows PERFORMANCE.md: median of >= 20 runs with L2 flushed on a GPU; decode time is
// schedule build + attention + combine, the plan made once outside the timed region.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "case_runner.h"
#include "commands.h"
#include "flags.h"
#include "flops.h"
#include "gemm_ceiling.h"
#include "machine.h"
#include "reference_check.h"
#include "suites.h"
#include "table.h"

namespace sparse_mla::cli {

namespace {

using Json = nlohmann::ordered_json;

// H200 ceilings measured for PERFORMANCE.md: dense bf16 GEMM (8192^3, torch) and
// device-to-device copy (bytes read + written).
constexpr double kH200FlopPerS = 791e12;
constexpr double kH200BytesPerS = 4.25e12;
// PERFORMANCE.md: median of >= 20 runs on a GPU.
constexpr int kGpuRuns = 20;
constexpr int kGpuWarmup = 3;
// CPU: as many runs as fit --time_budget, at least 3 (a median needs a few) and at most 20.
constexpr int kCpuMinRuns = 3;
constexpr int kCpuMaxRuns = 20;
// The CPU default scale keeps the default suite under a minute on a 2-core machine: measured
// 20 s (idle) to 53 s (load ~7 from other jobs) on the project's shared 2-core VM, verification
// included. A GPU runs full size.
constexpr double kCpuDefaultScale = 0.01;

struct Settings {
  std::string suite = std::string(kDefaultSuite);
  std::string backend = "auto";
  double scale = 1.0;
  std::string filter;
  int64_t iters = 0;
  int64_t warmup = -1;
  int64_t seed = 1;
  int64_t threads = 0;
  std::string kernel;
  std::string verify = "subset";
  double verify_gflop = 2.0;
  std::string decode_schedule = "reuse";
  double time_budget = 1.0;
  std::string json_path;
  bool list_cases = false;
  int64_t gemm_n = kGemmN;
  // A single case given by flags (--op set).
  std::string op;
  int64_t b = 1, s_q = 0, s_kv = 0, h_q = 0, d_qk = 0, topk = 0, page_block_size = 64;
  std::string format = "v4_fp8";
  int64_t extra_topk = 0, extra_page_block_size = 64, extra_s_kv = 0;
};

struct Ceilings {
  double flop_per_s = 0;  // 0 = not known
  double bytes_per_s = 0;
  std::string flop_source, bytes_source;
};

struct CaseResult {
  BenchCase full;  // as the suite defines it
  BenchCase run;   // as run (scaled)
  std::string kernel;
  std::string plan_reason;
  std::string error;  // non-empty: the case did not run
  std::vector<double> ms;
  double median_ms = NAN;
  int warmup = 0;
  // Decode: the medians with the schedule reused / built in every call (NAN = not timed).
  double median_reuse_ms = NAN, median_build_ms = NAN;
  WorkCount work;
  bool verified = false;
  VerifyResult verify;
  double make_s = 0, verify_s = 0;
  double gemm_after = 0;  // CPU: the GEMM rate sampled right after this case (load context)
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void declare_flags(FlagSet* f, Settings* s) {
  std::string suites;
  for (const std::string& n : suite_names()) suites += (suites.empty() ? "" : ", ") + n;
  f->add_string("suite", &s->suite, "comma-separated suites: " + suites);
  f->add_string("backend", &s->backend, "back end",
                {std::begin(kBackendChoices), std::end(kBackendChoices)});
  f->add_double("scale", &s->scale,
                "fraction of the full-size query tokens (prefill) / requests (decode); default 1 "
                "on CUDA, 0.01 otherwise",
                1e-6, 1.0);
  f->add_string("filter", &s->filter, "run only cases whose name contains this text");
  f->add_int("iters", &s->iters, "timed runs per case; 0 = 20 on CUDA, 3..20 by --time_budget", 0,
             100000);
  f->add_int("warmup", &s->warmup, "untimed runs first; -1 = 3 on CUDA, 1 on the CPU", -1, 1000);
  f->add_int("seed", &s->seed, "seed of the random case data", 0, INT64_MAX);
  f->add_int("threads", &s->threads, "CPU back end threads; 0 = all", 0, 4096);
  f->add_string("kernel", &s->kernel, "force one kernel variant by name (see `sparse-mla list`)");
  f->add_string("verify", &s->verify,
                "check against the reference: everything, a query subset within --verify_gflop, "
                "or not at all",
                {"full", "subset", "off"});
  f->add_double("verify_gflop", &s->verify_gflop,
                "reference work per case (GFLOP) above which only a subset is verified", 1e-6, 1e9);
  f->add_double("time_budget", &s->time_budget, "CPU: seconds of timed runs per case", 0.0, 3600.0);
  f->add_string("decode_schedule", &s->decode_schedule,
                "decode: the reported time reuses a split schedule built before the timed runs "
                "(reuse: every layer of a step after the first, and how the FlashMLA anchors were "
                "timed) or builds it in every timed call (build); on CUDA the JSON has both",
                {"reuse", "build"});
  f->add_string("json", &s->json_path, "write every number to this JSON file");
  f->add_switch("list_cases", &s->list_cases,
                "print each selected case as the flags that run it alone, and exit");
  f->add_int("gemm_n", &s->gemm_n, "CPU: size of the fp32 GEMM that measures the ceiling", 64,
             8192);
  f->add_string("op", &s->op, "run one case given by the flags below instead of suites",
                {"prefill", "decode"});
  f->add_int("b", &s->b, "decode: requests", 1, 1 << 20);
  f->add_int("s_q", &s->s_q, "query tokens (prefill) / per request (decode)", 1, 1 << 24);
  f->add_int("s_kv", &s->s_kv, "prefill: kv rows; decode: cache tokens per request", 1,
             int64_t{1} << 31);
  f->add_int("h_q", &s->h_q, "query heads", 1, 128);
  f->add_int("d_qk", &s->d_qk, "prefill: 512 or 576 (decode: the format's; bf16: 576)", 512, 576);
  f->add_int("topk", &s->topk, "index slots per query", 1, 1 << 20);
  f->add_string("format", &s->format, "decode: KV-cache format", {"v32_fp8", "v4_fp8", "bf16"});
  f->add_int("page_block_size", &s->page_block_size, "decode: tokens per page block", 1, 1 << 16);
  f->add_int("extra_topk", &s->extra_topk, "decode: slots of the extra cache; 0 = no extra cache",
             0, 1 << 20);
  f->add_int("extra_page_block_size", &s->extra_page_block_size, "decode: extra cache page size", 1,
             1 << 16);
  f->add_int("extra_s_kv", &s->extra_s_kv, "decode: extra cache tokens per request (0 = --s_kv)", 0,
             int64_t{1} << 31);
  f->set_default_text("scale", "");
  for (const char* needed_with_op : {"s_q", "s_kv", "h_q", "d_qk", "topk"}) {
    f->set_default_text(needed_with_op, "");
  }
}

// The case given by --op and the shape flags.
Status custom_case(const Settings& s, const FlagSet& f, BenchCase* c) {
  c->suite = "custom";
  auto need = [&](const char* name) -> Status {
    if (!f.was_set(name)) return invalid_argument("--op " + s.op + " needs --" + name);
    return {};
  };
  for (const char* name : {"s_q", "s_kv", "h_q", "topk"}) SMLA_RETURN_IF_ERROR(need(name));
  if (s.op == "prefill") {
    SMLA_RETURN_IF_ERROR(need("d_qk"));
    if (s.d_qk != 512 && s.d_qk != 576) {
      return invalid_argument("--d_qk = " + std::to_string(s.d_qk) + " must be 512 or 576");
    }
    c->op = Operation::kSparsePrefill;
    c->prefill = {s.s_q, s.s_kv, s.h_q, s.d_qk, s.topk};
    return {};
  }
  c->op = Operation::kSparseDecode;
  DecodeShape& d = c->decode;
  d.b = s.b;
  d.s_q = s.s_q;
  d.h_q = s.h_q;
  d.topk = s.topk;
  d.format = *parse_kv_cache_format(s.format);
  d.page_block_size = s.page_block_size;
  d.s_kv = s.s_kv;
  d.has_extra = s.extra_topk > 0;
  d.extra_topk = s.extra_topk;
  d.extra_page_block_size = d.has_extra ? s.extra_page_block_size : 0;
  d.extra_s_kv = d.has_extra ? (s.extra_s_kv > 0 ? s.extra_s_kv : s.s_kv) : 0;
  return {};
}

Status select_cases(const Settings& s, const FlagSet& f, std::vector<BenchCase>* cases) {
  cases->clear();
  if (!s.op.empty()) {
    if (f.was_set("suite")) return invalid_argument("--suite and --op exclude each other");
    BenchCase c;
    SMLA_RETURN_IF_ERROR(custom_case(s, f, &c));
    cases->push_back(c);
  } else {
    for (const char* shape :
         {"b", "s_q", "s_kv", "h_q", "d_qk", "topk", "format", "page_block_size", "extra_topk",
          "extra_page_block_size", "extra_s_kv"}) {
      if (f.was_set(shape)) {
        return invalid_argument("--" + std::string(shape) + " describes a single case: add --op");
      }
    }
    std::stringstream list(s.suite);
    for (std::string name; std::getline(list, name, ',');) {
      std::vector<BenchCase> suite;
      SMLA_RETURN_IF_ERROR(suite_cases(name, &suite));
      cases->insert(cases->end(), suite.begin(), suite.end());
    }
  }
  if (!s.filter.empty()) {
    std::erase_if(*cases,
                  [&](const BenchCase& c) { return c.name().find(s.filter) == std::string::npos; });
    if (cases->empty()) {
      return invalid_argument("--filter = '" + s.filter + "' matches no case of the suites");
    }
  }
  return {};
}

// GPU ceilings: PERFORMANCE.md's H200 numbers, plus this device's copy bandwidth for the record.
Ceilings gpu_ceilings(Device device, Json* record) {
  Ceilings c;
  c.flop_per_s = kH200FlopPerS;
  c.bytes_per_s = kH200BytesPerS;
  c.flop_source = "H200 dense bf16 GEMM, PERFORMANCE.md";
  c.bytes_source = "H200 device-to-device copy, PERFORMANCE.md";
  (*record)["flop_per_s"] = c.flop_per_s;
  (*record)["flop_source"] = c.flop_source;
  (*record)["bytes_per_s"] = c.bytes_per_s;
  (*record)["bytes_source"] = c.bytes_source;
  std::optional<CopyBandwidth> copy =
      measure_device_copy(device, kDeviceCopyBytes, kDeviceCopyRepeats);
  (*record)["measured_device_copy_bytes_per_s"] = copy ? Json(copy->bytes_per_s) : Json();
  return c;
}

// CPU ceilings are the best the machine showed during the run. The machine is shared: a single
// measurement taken while others compiled put the back end at 119 % of "the GEMM rate". So the
// GEMM and the copy are sampled before the first case and again after every case, and the best
// sample of each is the ceiling all rows are reported against.
class HostCeilings {
 public:
  explicit HostCeilings(int64_t gemm_n) : gemm_n_(static_cast<int>(gemm_n)) {}

  // `first`: the initial measurement; the samples after each case are short (2 GEMMs and one
  // copy, about 0.1 s) so that they add little to the run.
  // Returns this sample's GEMM rate (0 without CBLAS).
  double sample(bool first) {
    const int gemm_repeats = first ? kGemmRepeats : 2;
    const int copy_repeats = first ? kHostCopyRepeats : 1;
    double rate = 0;
    if (std::optional<GemmCeiling> g = measure_fp32_gemm(gemm_n_, gemm_repeats)) {
      rate = g->flop_per_s;
      if (rate > best_flop_) best_flop_ = rate;
      library_ = g->library;
      ++gemm_samples_;
      gemm_runs_ += gemm_repeats;
    }
    CopyBandwidth copy = measure_host_copy(kHostCopyBytes, copy_repeats);
    if (copy.bytes_per_s > best_bytes_) best_bytes_ = copy.bytes_per_s;
    copy_threads_ = copy.threads;
    ++copy_samples_;
    copy_runs_ += copy_repeats;
    return rate;
  }

  Ceilings ceilings() const {
    Ceilings c;
    c.flop_per_s = best_flop_;
    c.bytes_per_s = best_bytes_;
    c.flop_source = gemm_samples_ == 0 ? "not measured: built without CBLAS"
                                       : "fp32 sgemm " + std::to_string(gemm_n_) + "^3, best of " +
                                             std::to_string(gemm_runs_) + " runs over the bench (" +
                                             library_ + ")";
    c.bytes_source = "host memcpy " + std::to_string(kHostCopyBytes >> 20) + " MiB, " +
                     std::to_string(copy_threads_) + " threads, best of " +
                     std::to_string(copy_runs_) + " runs over the bench";
    return c;
  }

  Json record() const {
    Ceilings c = ceilings();
    return {{"flop_per_s", gemm_samples_ > 0 ? Json(c.flop_per_s) : Json()},
            {"flop_source", c.flop_source},
            {"bytes_per_s", c.bytes_per_s},
            {"bytes_source", c.bytes_source}};
  }

 private:
  int gemm_n_;
  double best_flop_ = 0, best_bytes_ = 0;
  int gemm_samples_ = 0, gemm_runs_ = 0, copy_samples_ = 0, copy_runs_ = 0, copy_threads_ = 0;
  std::string library_;
};

// How many timed runs, and times them.
Status time_case(const std::function<Status()>& fn, Device device, const Settings& s,
                 CaseResult* r) {
  if (device.is_cuda()) {
    r->warmup = s.warmup >= 0 ? static_cast<int>(s.warmup) : kGpuWarmup;
    const int runs = s.iters > 0 ? static_cast<int>(s.iters) : kGpuRuns;
    return time_runs(device, nullptr, fn, r->warmup, runs, true, &r->ms);
  }
  r->warmup = s.warmup >= 0 ? static_cast<int>(s.warmup) : 1;
  std::vector<double> first;
  // The warm-up runs are timed too: the last one sizes the number of runs.
  if (r->warmup > 0)
    SMLA_RETURN_IF_ERROR(time_runs(device, nullptr, fn, 0, r->warmup, false, &first));
  int runs = static_cast<int>(s.iters);
  if (runs == 0) {
    double one_ms = first.empty() ? 0 : first.back();
    runs = one_ms > 0 ? static_cast<int>(s.time_budget * 1e3 / one_ms) : kCpuMaxRuns;
    runs = std::clamp(runs, kCpuMinRuns, kCpuMaxRuns);
  }
  return time_runs(device, nullptr, fn, 0, runs, false, &r->ms);
}

// Realistic data for timing (PERFORMANCE.md: "use the test recipe's random data"): every index
// valid, no NaN-poisoned rows, no empty queries, no sinks or lengths, contiguous tensors.
verify::PrefillRecipe prefill_recipe(const PrefillShape& p, uint64_t seed) {
  verify::PrefillRecipe r;
  r.s_q = p.s_q;
  r.s_kv = p.s_kv;
  r.h_q = p.h_q;
  r.d_qk = p.d_qk;
  r.topk = p.topk;
  r.attn_sink = r.topk_length = r.padded_strides = false;
  r.invalid_indices = r.empty_queries = r.poison_unused_rows = false;
  r.seed = seed;
  return r;
}

verify::DecodeRecipe decode_recipe(const DecodeShape& d, uint64_t seed) {
  verify::DecodeRecipe r;
  r.b = d.b;
  r.s_q = d.s_q;
  r.h_q = d.h_q;
  r.topk = d.topk;
  r.format = d.format;
  r.page_block_size = d.page_block_size;
  // The cache holds s_kv tokens per request; indices are drawn over all of it.
  r.num_blocks = (d.b * d.s_kv + d.page_block_size - 1) / d.page_block_size;
  r.extra_cache = d.has_extra;
  if (d.has_extra) {
    r.extra_topk = d.extra_topk;
    r.extra_page_block_size = d.extra_page_block_size;
    r.extra_num_blocks =
        (d.b * d.extra_s_kv + d.extra_page_block_size - 1) / d.extra_page_block_size;
  }
  r.topk_length = r.attn_sink = r.extra_topk_length = r.padded_strides = false;
  r.invalid_indices = r.empty_queries = r.poison_unused_rows = false;
  r.seed = seed;
  return r;
}

// Makes, runs, times and verifies one case.
void run_case(const Settings& s, Device device, const RunOptions& options, CaseResult* r) {
  const BenchCase& c = r->run;
  auto start = std::chrono::steady_clock::now();
  auto fail = [&](const Status& status) { r->error = status.message(); };
  const double budget = s.verify == "full" ? INFINITY : s.verify_gflop * 1e9;
  if (c.op == Operation::kSparsePrefill) {
    verify::PrefillCase data;
    Status st = verify::make_prefill_case(prefill_recipe(c.prefill, s.seed), &data);
    if (!st.ok()) return fail(st);
    r->make_s = seconds_since(start);
    r->work = prefill_work(data.problem.s_q, data.problem.h_q, data.problem.d_qk, data.problem.d_v,
                           data.attended, data.valid_slots);
    PrefillRunner runner;
    if (st = runner.prepare(data, device, options); !st.ok()) return fail(st);
    r->kernel = runner.kernel();
    if (st = time_case([&] { return runner.run(); }, device, s, r); !st.ok()) return fail(st);
    if (s.verify == "off") return;
    verify::PrefillOutputs got;
    if (st = runner.fetch(&got); !st.ok()) return fail(st);
    auto v0 = std::chrono::steady_clock::now();
    int64_t stride = subset_stride(data.problem.s_q, r->work.flop, budget);
    if (st = verify_prefill(data, got, stride, &r->verify); !st.ok()) return fail(st);
    r->verified = true;
    r->verify_s = seconds_since(v0);
    return;
  }
  verify::DecodeCase data;
  Status st = verify::make_decode_case(decode_recipe(c.decode, s.seed), &data);
  if (!st.ok()) return fail(st);
  r->make_s = seconds_since(start);
  const SparseDecodeProblem& p = data.problem;
  r->work = decode_work(p.b, p.s_q, p.h_q, p.d_qk, p.d_v, p.format, data.attended,
                        data.retrieved_main + data.retrieved_extra);
  DecodeRunner runner;
  if (st = runner.prepare(data, device, options); !st.ok()) return fail(st);
  r->kernel = runner.kernel();
  r->plan_reason = runner.plan().reason;
  // The other mode first (CUDA only: planning is host work on the CPU back end), so that the
  // outputs verified below are those of the reported mode's last run.
  const DecodeSchedule reported =
      s.decode_schedule == "reuse" ? DecodeSchedule::kReuse : DecodeSchedule::kBuild;
  const DecodeSchedule other =
      reported == DecodeSchedule::kReuse ? DecodeSchedule::kBuild : DecodeSchedule::kReuse;
  auto median_of = [&](DecodeSchedule mode) -> double& {
    return mode == DecodeSchedule::kReuse ? r->median_reuse_ms : r->median_build_ms;
  };
  auto time_mode = [&](DecodeSchedule mode, CaseResult* into) {
    return time_case([&] { return runner.run(mode); }, device, s, into);
  };
  if (device.is_cuda()) {
    CaseResult other_result;
    if (st = time_mode(other, &other_result); !st.ok()) return fail(st);
    median_of(other) = median(other_result.ms);
  }
  if (st = runner.run(DecodeSchedule::kBuild); !st.ok()) return fail(st);  // a schedule to reuse
  if (st = time_mode(reported, r); !st.ok()) return fail(st);
  median_of(reported) = median(r->ms);
  if (s.verify == "off") return;
  verify::DecodeOutputs got;
  if (st = runner.fetch(&got); !st.ok()) return fail(st);
  auto v0 = std::chrono::steady_clock::now();
  int64_t stride_b = 1, stride_s = 1;
  decode_subset_strides(p.b, p.s_q, r->work.flop, budget, &stride_b, &stride_s);
  if (st = verify_decode(data, got, stride_b, stride_s, &r->verify); !st.ok()) return fail(st);
  r->verified = true;
  r->verify_s = seconds_since(v0);
}

// "s_q=41" / "b=1" when scaled, "full" otherwise.
std::string run_as(const CaseResult& r) {
  if (r.run.op == Operation::kSparsePrefill) {
    return r.run.prefill.s_q == r.full.prefill.s_q ? "full"
                                                   : "s_q=" + std::to_string(r.run.prefill.s_q);
  }
  return r.run.decode.b == r.full.decode.b ? "full" : "b=" + std::to_string(r.run.decode.b);
}

bool full_size(const CaseResult& r) { return run_as(r) == "full"; }

std::string verify_cell(const CaseResult& r) {
  if (!r.error.empty()) return "ERROR";
  if (!r.verified) return "off";
  const VerifyResult& v = r.verify;
  std::string what = v.checked == v.total
                         ? "all " + std::to_string(v.total)
                         : std::to_string(v.checked) + "/" + std::to_string(v.total);
  return std::string(v.ok ? "pass " : "FAIL ") + what + " queries";
}

// Anchor ratio (anchor time / our time; > 1 = faster than FlashMLA): only for a full-size case
// on CUDA, where the anchor was measured.
std::optional<double> anchor_ratio(const CaseResult& r, Backend backend) {
  if (!r.full.anchor || backend != Backend::kCuda || !full_size(r) || !r.error.empty()) {
    return std::nullopt;
  }
  return r.full.anchor->us / (r.median_ms * 1e3);
}

void print_table(const std::vector<CaseResult>& results, Backend backend, const Ceilings& ceil) {
  Table t({"case", "run as", "back end", "kernel", "runs", "median", "FLOP/s", "bytes/s",
           "FLOP floor", "bytes floor", "% peak FLOP", "% roofline", "anchor", "vs anchor",
           "verified"});
  for (const CaseResult& r : results) {
    const double sec = r.median_ms * 1e-3;
    const double flop_floor = ceil.flop_per_s > 0 ? r.work.flop / ceil.flop_per_s : NAN;
    const double bytes_floor = ceil.bytes_per_s > 0 ? r.work.bytes / ceil.bytes_per_s : NAN;
    double roof = std::isnan(flop_floor) ? bytes_floor : std::max(flop_floor, bytes_floor);
    std::optional<double> ratio = anchor_ratio(r, backend);
    std::string anchor = r.full.anchor ? format_time_ms(r.full.anchor->us * 1e-3) : "-";
    if (r.error.empty()) {
      t.add_row({r.full.name(), run_as(r), backend_name(backend), r.kernel,
                 std::to_string(r.ms.size()), format_time_ms(r.median_ms),
                 format_rate(r.work.flop / sec, "FLOP/s"), format_rate(r.work.bytes / sec, "B/s"),
                 format_time_ms(flop_floor * 1e3), format_time_ms(bytes_floor * 1e3),
                 format_percent(r.work.flop / sec / ceil.flop_per_s), format_percent(roof / sec),
                 anchor, ratio ? format_fixed(*ratio, 2) + "x" : "-", verify_cell(r)});
    } else {
      t.add_row({r.full.name(), run_as(r), backend_name(backend), r.kernel, "0", "-", "-", "-", "-",
                 "-", "-", "-", anchor, "-", verify_cell(r)});
    }
  }
  t.print(std::cout);
}

// Cases of one problem at several head counts: the tp-shards goals as ratios.
struct HeadRatio {
  std::string group;
  int64_t h_q, base_h_q;
  bool decode;
  double ratio;  // decode: time / base time (goal <= 0.5 at h_q 16 vs 64);
                 // prefill: FLOP/s / base FLOP/s (goal >= 0.6 at h_q 16/32 vs 128)
};

std::vector<HeadRatio> head_ratios(const std::vector<CaseResult>& results) {
  std::map<std::string, std::map<int64_t, const CaseResult*>> groups;
  for (const CaseResult& r : results) {
    if (r.error.empty() && r.full.suite == "tp-shards") {
      groups[r.full.head_group()][r.full.h_q()] = &r;
    }
  }
  std::vector<HeadRatio> out;
  for (const auto& [group, by_heads] : groups) {
    if (by_heads.size() < 2) continue;
    const bool decode = by_heads.begin()->second->full.op == Operation::kSparseDecode;
    const int64_t base = decode ? 64 : 128;
    auto it = by_heads.find(base);
    if (it == by_heads.end()) continue;
    const CaseResult& b = *it->second;
    for (const auto& [h, r] : by_heads) {
      if (h == base) continue;
      double ratio = decode ? r->median_ms / b.median_ms
                            : (r->work.flop / r->median_ms) / (b.work.flop / b.median_ms);
      out.push_back({group, h, base, decode, ratio});
    }
  }
  return out;
}

void print_summaries(const std::vector<CaseResult>& results, Backend backend, const Ceilings& ceil,
                     const std::vector<HeadRatio>& ratios) {
  std::cout << "\nceilings: " << format_rate(ceil.flop_per_s, "FLOP/s") << " (" << ceil.flop_source
            << "), " << format_rate(ceil.bytes_per_s, "B/s") << " (" << ceil.bytes_source << ")\n";
  if (backend != Backend::kCuda && ceil.flop_per_s > 0) {
    for (Operation op : {Operation::kSparsePrefill, Operation::kSparseDecode}) {
      double flop = 0, sec = 0;
      for (const CaseResult& r : results) {
        if (r.error.empty() && r.run.op == op) {
          flop += r.work.flop;
          sec += r.median_ms * 1e-3;
        }
      }
      if (sec == 0) continue;
      std::cout << backend_name(backend) << " back end, "
                << (op == Operation::kSparsePrefill ? "prefill" : "decode")
                << " (all cases, total FLOPs / total median time): "
                << format_rate(flop / sec, "FLOP/s") << " = "
                << format_percent(flop / sec / ceil.flop_per_s)
                << " of the fp32 GEMM rate (goal >= 30%)\n";
    }
  }
  for (const HeadRatio& h : ratios) {
    std::cout << "heads: " << h.group << ": h_q=" << h.h_q << " "
              << (h.decode ? "takes " : "reaches ") << format_fixed(h.ratio, 2)
              << "x the h_q=" << h.base_h_q << (h.decode ? " time" : " FLOP/s");
    if (h.decode && h.h_q == 16) std::cout << " (goal <= 0.5x)";
    if (!h.decode && (h.h_q == 16 || h.h_q == 32)) std::cout << " (goal >= 0.6x)";
    std::cout << "\n";
  }
  bool subset = false;
  for (const CaseResult& r : results)
    subset = subset || (r.verified && r.verify.checked < r.verify.total);
  if (subset) {
    std::cout << "verified k/n queries: the reference ran on an evenly spaced subset (every i-th "
                 "prefill token; every i-th decode request, or one request's every j-th token), "
                 "sized to stay within --verify_gflop\n";
  }
  for (const CaseResult& r : results) {
    if (!r.error.empty()) std::cout << "error: " << r.full.name() << ": " << r.error << "\n";
    if (r.verified && !r.verify.ok) {
      std::cout << "verification failed: " << r.full.name() << ": " << r.verify.message << "\n";
    }
  }
}

Json shape_json(const BenchCase& c) {
  Json j;
  if (c.op == Operation::kSparsePrefill) {
    const PrefillShape& p = c.prefill;
    j = {{"s_q", p.s_q},   {"s_kv", p.s_kv}, {"h_q", p.h_q},  {"h_kv", 1},
         {"d_qk", p.d_qk}, {"d_v", 512},     {"topk", p.topk}};
    return j;
  }
  const DecodeShape& d = c.decode;
  j = {{"b", d.b},
       {"s_q", d.s_q},
       {"h_q", d.h_q},
       {"h_kv", 1},
       {"d_qk",
        kv_cache_format_info(d.format).d_qk != 0 ? kv_cache_format_info(d.format).d_qk : 576},
       {"d_v", 512},
       {"topk", d.topk},
       {"format", kv_cache_format_name(d.format)},
       {"page_block_size", d.page_block_size},
       {"s_kv", d.s_kv}};
  if (d.has_extra) {
    j["extra_topk"] = d.extra_topk;
    j["extra_page_block_size"] = d.extra_page_block_size;
    j["extra_s_kv"] = d.extra_s_kv;
  }
  return j;
}

Json case_json(const CaseResult& r, Backend backend, const Ceilings& ceil,
               const std::string& reproduce_suffix, const std::string& decode_schedule) {
  Json j;
  j["suite"] = r.full.suite;
  j["name"] = r.full.name();
  j["op"] = r.full.op == Operation::kSparsePrefill ? "prefill" : "decode";
  j["shape_full"] = shape_json(r.full);
  j["shape_run"] = shape_json(r.run);
  j["reproduce"] = "sparse-mla bench " + shell_join(r.full.flags()) + reproduce_suffix;
  j["kernel"] = r.kernel;
  if (!r.plan_reason.empty()) j["plan_reason"] = r.plan_reason;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  const double sec = r.median_ms * 1e-3;
  j["warmup_runs"] = r.warmup;
  j["times_ms"] = r.ms;
  j["median_ms"] = r.median_ms;
  if (r.full.op == Operation::kSparseDecode) {
    j["decode_schedule"] = decode_schedule;  // which of the two median_ms is
    j["median_ms_schedule_reuse"] =
        std::isnan(r.median_reuse_ms) ? Json() : Json(r.median_reuse_ms);
    j["median_ms_schedule_build"] =
        std::isnan(r.median_build_ms) ? Json() : Json(r.median_build_ms);
  }
  j["flop"] = r.work.flop;
  j["bytes"] = r.work.bytes;
  j["flop_per_s"] = r.work.flop / sec;
  j["bytes_per_s"] = r.work.bytes / sec;
  j["flop_floor_ms"] = ceil.flop_per_s > 0 ? Json(r.work.flop / ceil.flop_per_s * 1e3) : Json();
  j["bytes_floor_ms"] = ceil.bytes_per_s > 0 ? Json(r.work.bytes / ceil.bytes_per_s * 1e3) : Json();
  j["fraction_of_peak_flop"] =
      ceil.flop_per_s > 0 ? Json(r.work.flop / sec / ceil.flop_per_s) : Json();
  if (r.full.anchor) {
    j["anchor"] = {
        {"us", r.full.anchor->us},
        {"tflop_per_s", r.full.anchor->tflops > 0 ? Json(r.full.anchor->tflops) : Json()},
        {"what", r.full.anchor->note + ", H200, PERFORMANCE.md"}};
  }
  std::optional<double> ratio = anchor_ratio(r, backend);
  j["anchor_time_over_ours"] = ratio ? Json(*ratio) : Json();
  if (r.gemm_after > 0) j["gemm_flop_per_s_sampled_after"] = r.gemm_after;
  j["data_seconds"] = r.make_s;
  if (r.verified) {
    const VerifyResult& v = r.verify;
    j["verify"] = {{"ok", v.ok},
                   {"checked", v.checked},
                   {"total", v.total},
                   {"out_max_abs_err", v.out_max_abs_err},
                   {"out_cos_diff", v.out_cos_diff},
                   {"message", v.message},
                   {"seconds", r.verify_s}};
  } else {
    j["verify"] = nullptr;
  }
  return j;
}

Json gpu_json(const DeviceInfo& g) {
  return {{"index", g.index},
          {"name", g.name},
          {"sm_count", g.sm_count},
          {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
          {"memory_bytes", g.memory_bytes},
          {"l2_bytes", g.l2_bytes},
          {"max_sm_clock_mhz", g.max_sm_clock_mhz},
          {"memory_clock_mhz", g.memory_clock_mhz},
          {"memory_bus_bits", g.memory_bus_bits}};
}

}  // namespace

int bench_command(const Invocation& inv) {
  Settings s;
  FlagSet flags("bench");
  declare_flags(&flags, &s);
  if (Status st = flags.parse(inv.args); !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitUsageError;
  }
  if (flags.help_requested()) {
    std::cout << "usage: sparse-mla bench [flags]\n"
              << "Runs benchmark suites (default: " << kDefaultSuite
              << " = DeepSeek V4 Flash + Pro, prefill and decode), verifies every case against "
                 "the reference and prints a table.\n\n"
              << flags.usage();
    return kExitOk;
  }
  std::vector<BenchCase> cases;
  if (Status st = select_cases(s, flags, &cases); !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitUsageError;
  }
  const Backend backend = resolve_backend(*parse_backend(s.backend));
  if (backend == Backend::kCuda && !cuda_available()) {
    std::cerr << "sparse-mla bench: --backend = cuda but no CUDA device is available to this "
                 "build\n";
    return kExitFailure;
  }
  const Device device = device_for(backend);
  if (!flags.was_set("scale") && s.op.empty()) {
    s.scale = backend == Backend::kCuda ? 1.0 : kCpuDefaultScale;
  }
  // The flags that reproduce this run's settings, appended to every case's own flags.
  std::string suffix = " --backend " + std::string(backend_name(backend));
  if (s.scale != 1.0) {
    std::ostringstream os;
    os << " --scale " << s.scale;
    suffix += os.str();
  }
  suffix += " --seed " + std::to_string(s.seed);
  if (!s.kernel.empty()) suffix += " --kernel " + s.kernel;
  if (s.threads > 0) suffix += " --threads " + std::to_string(s.threads);
  if (s.iters > 0) suffix += " --iters " + std::to_string(s.iters);
  if (s.decode_schedule != "reuse") suffix += " --decode_schedule " + s.decode_schedule;

  if (s.list_cases) {
    for (const BenchCase& c : cases) {
      std::cout << "sparse-mla bench " << shell_join(c.flags()) << suffix << "\n";
    }
    return kExitOk;
  }

  // A run can take minutes on a GPU: find out now, not after it, that --json cannot be written.
  // The probe appends nothing, and removes the file if it made it.
  if (!s.json_path.empty()) {
    const bool existed = std::filesystem::exists(s.json_path);
    if (!std::ofstream(s.json_path, std::ios::app)) {
      std::cerr << "sparse-mla bench: cannot write --json = '" << s.json_path << "'\n";
      return kExitUsageError;
    }
    if (!existed) std::filesystem::remove(s.json_path);
  }

  RunOptions options;
  options.backend = backend;
  options.num_threads = static_cast<int>(s.threads);
  options.kernel = s.kernel;

  const MachineInfo machine = describe_machine();
  const SourceInfo source = describe_source();
  std::cerr << "measuring the ceilings ...\n";
  const bool on_host = backend != Backend::kCuda;
  HostCeilings host_ceilings(s.gemm_n);
  Json ceil_record;
  Ceilings ceil;
  if (on_host) {
    host_ceilings.sample(true);
  } else {
    ceil = gpu_ceilings(device, &ceil_record);
  }

  std::vector<CaseResult> results;
  const auto total_start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseResult r;
    r.full = cases[i];
    r.run = cases[i].scaled(s.scale);
    std::cerr << "[" << i + 1 << "/" << cases.size() << "] " << r.full.name() << " (" << run_as(r)
              << ") ..." << std::flush;
    run_case(s, device, options, &r);
    if (r.error.empty()) r.median_ms = median(r.ms);
    std::cerr << " "
              << (r.error.empty()
                      ? format_time_ms(r.median_ms) + " x " + std::to_string(r.ms.size()) + " runs"
                      : "error")
              << ", " << verify_cell(r) << "\n";
    if (on_host) r.gemm_after = host_ceilings.sample(false);
    results.push_back(std::move(r));
  }
  const double total_s = seconds_since(total_start);
  if (on_host) {
    ceil = host_ceilings.ceilings();
    ceil_record = host_ceilings.record();
  }

  std::cout << "sparse-mla bench: " << cases.size() << " cases on " << backend_name(backend) << " ("
            << (backend == Backend::kCuda && !machine.gpus.empty() ? machine.gpus[0].name
                                                                   : machine.cpu_model)
            << "), scale " << s.scale << ", commit " << source.commit.substr(0, 12)
            << (source.dirty ? "+dirty" : "") << "\n\n";
  print_table(results, backend, ceil);
  const std::vector<HeadRatio> ratios = head_ratios(results);
  print_summaries(results, backend, ceil, ratios);
  std::cout << "decode times: the split schedule "
            << (s.decode_schedule == "reuse"
                    ? "built once before the timed runs and reused (--decode_schedule reuse, "
                      "how the FlashMLA anchors were timed)"
                    : "built in every timed call (--decode_schedule build)")
            << (backend == Backend::kCuda ? "; the JSON has both modes' medians\n" : "\n");
  std::cout << "total " << format_fixed(total_s, 1) << " s\n";

  bool all_ok = true;
  for (const CaseResult& r : results)
    all_ok = all_ok && r.error.empty() && (!r.verified || r.verify.ok);

  if (!s.json_path.empty()) {
    Json j;
    j["tool"] = "sparse-mla bench";
    j["command"] = shell_join(inv.argv);
    j["reproduce"] = s.op.empty()
                         ? "sparse-mla bench --suite " + s.suite + suffix +
                               (s.filter.empty() ? "" : " --filter " + shell_join({s.filter}))
                         : "sparse-mla bench " + shell_join(cases.front().flags()) + suffix;
    j["date"] = utc_date_time();
    j["git_commit"] = source.commit;
    j["git_dirty"] = source.dirty;
    j["library_version"] = source.library_version;
    j["backend"] = backend_name(backend);
    j["scale"] = s.scale;
    j["seed"] = s.seed;
    j["verify_mode"] = s.verify;
    j["verify_gflop"] = s.verify_gflop;
    j["decode_schedule"] = s.decode_schedule;
    j["machine"] = {{"cpu_model", machine.cpu_model},
                    {"hardware_threads", machine.hardware_threads},
                    {"hostname", machine.hostname}};
    Json gpus = Json::array();
    for (const DeviceInfo& g : machine.gpus) gpus.push_back(gpu_json(g));
    j["gpus"] = gpus;
    j["ceilings"] = ceil_record;
    Json list = Json::array();
    for (const CaseResult& r : results)
      list.push_back(case_json(r, backend, ceil, suffix, s.decode_schedule));
    j["cases"] = list;
    Json heads = Json::array();
    for (const HeadRatio& h : ratios) {
      heads.push_back({{"group", h.group},
                       {"h_q", h.h_q},
                       {"base_h_q", h.base_h_q},
                       {"measure", h.decode ? "time / base time" : "FLOP/s / base FLOP/s"},
                       {"ratio", h.ratio}});
    }
    j["head_ratios"] = heads;
    j["total_seconds"] = total_s;
    j["all_ok"] = all_ok;
    std::ofstream file(s.json_path);
    file << j.dump(2) << "\n";
    if (!file) {
      std::cerr << "sparse-mla bench: cannot write --json = '" << s.json_path << "'\n";
      return kExitFailure;
    }
    std::cerr << "wrote " << s.json_path << "\n";
  }
  return all_ok ? kExitOk : kExitFailure;
}

}  // namespace sparse_mla::cli
