// One case of `sparse-mla bench` (bench_run.h).
#include "bench_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <new>
#include <sstream>

#include "case_runner.h"
#include "isolated_timing.h"
#include "sparse_mla/runtime.h"

namespace sparse_mla::cli::bench {

namespace {

// docs/flashmla_baseline.md: median of >= 20 runs on a GPU.
constexpr int kGpuRuns = 20;
constexpr int kGpuWarmup = 3;
// CPU: as many runs as fit --time_budget, at least 3 (a median needs a few) and at most 20
// (isolated calls, whose point is the small per-call host time: at most 1000).
constexpr int kCpuMinRuns = 3;
constexpr int kCpuMaxRuns = 20;
constexpr int kCpuMaxIsolatedRuns = 1000;

// Times `fn` as --timing says, into r->ms (one time per run) and, when isolated, r->isolated.
Status time_runs_as_set(const std::function<Status()>& fn, Device device, const Settings& s,
                        int warmup, int runs, CaseResult* r) {
  if (s.timing_mode() == Timing::kQueued) {
    return time_runs(device, nullptr, fn, warmup, runs, device.is_cuda(), &r->ms);
  }
  IsolatedTimes& t = r->isolated_times;
  SMLA_RETURN_IF_ERROR(
      time_isolated_calls(device, fn, warmup, runs, device.is_cuda(), &t.host_ms, &t.device_ms));
  r->isolated = true;
  t.device_is_host = !device.is_cuda();
  t.median_host_ms = median(t.host_ms);
  t.median_device_ms = median(t.device_ms);
  r->ms.clear();
  for (size_t i = 0; i < t.host_ms.size(); ++i) {
    r->ms.push_back(t.device_is_host ? t.host_ms[i] : t.host_ms[i] + t.device_ms[i]);
  }
  return {};
}

// How many timed runs, and times them.
Status time_case(const std::function<Status()>& fn, Device device, const Settings& s,
                 CaseResult* r) {
  if (device.is_cuda()) {
    r->warmup = s.warmup >= 0 ? static_cast<int>(s.warmup) : kGpuWarmup;
    const int runs = s.iters > 0 ? static_cast<int>(s.iters) : kGpuRuns;
    return time_runs_as_set(fn, device, s, r->warmup, runs, r);
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
    runs = std::clamp(runs, kCpuMinRuns,
                      s.timing_mode() == Timing::kIsolated ? kCpuMaxIsolatedRuns : kCpuMaxRuns);
  }
  return time_runs_as_set(fn, device, s, 0, runs, r);
}

// Realistic data for timing (docs/flashmla_baseline.md: "use the test recipe's random data"): every
// index valid, no NaN-poisoned rows, no empty queries, no sinks or lengths, contiguous tensors;
// the lists as FlashMLA's benchmarks draw them (its figures are the anchors): a prefill token's
// slots distinct, a decode request's cache about s_kv tokens long on pages of its own, each
// token's list distinct positions of its request (verify::DecodeRecipe::request_tokens).
verify::PrefillRecipe prefill_recipe(const PrefillShape& p, uint64_t seed) {
  verify::PrefillRecipe r;
  r.s_q = p.s_q;
  r.s_kv = p.s_kv;
  r.h_q = p.h_q;
  r.d_qk = p.d_qk;
  r.topk = p.topk;
  r.attn_sink = r.topk_length = r.padded_strides = false;
  r.invalid_indices = r.empty_queries = r.poison_unused_rows = false;
  r.distinct_indices = true;
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
  r.d_qk = d.format == KvCacheFormat::kBf16 ? d.d_qk() : 0;
  r.kv_layout = d.kv_layout;
  r.page_block_size = d.page_block_size;
  r.request_tokens = d.s_kv;
  r.extra_cache = d.has_extra;
  if (d.has_extra) {
    r.extra_format = d.extra_format;
    r.extra_kv_layout = d.extra_kv_layout;
    r.extra_topk = d.extra_topk;
    r.extra_page_block_size = d.extra_page_block_size;
    r.extra_request_tokens = d.extra_s_kv;
  }
  r.shared_indices = d.shared_indices;
  r.topk_length = r.attn_sink = r.extra_topk_length = r.padded_strides = false;
  r.invalid_indices = r.empty_queries = r.poison_unused_rows = false;
  r.seed = seed;
  return r;
}

void run_case_unguarded(const Settings& s, Device device, const RunOptions& options,
                        CaseResult* r) {
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
  r->work =
      decode_work(p.b, p.s_q, p.h_q, p.d_qk, p.d_v, data.attended, p.format, data.retrieved_main,
                  p.extra_format.value_or(p.format), data.retrieved_extra);
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

}  // namespace

void run_case(const Settings& s, Device device, const RunOptions& options, CaseResult* r) {
  // check_case_fits refuses what cannot fit at all; a case that fits on paper can still fail to
  // allocate on a busy machine, which is this case's error, not the end of the run.
  try {
    run_case_unguarded(s, device, options, r);
  } catch (const std::bad_alloc&) {
    const CaseBytes need = case_bytes(r->run, s.seed, device.is_cuda());
    r->error = "out of host memory making or checking the case (its tensors need about " +
               std::to_string(static_cast<int64_t>(need.host)) + " bytes)";
  }
}

CaseBytes case_bytes(const BenchCase& c, uint64_t seed, bool on_cuda) {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  double inputs = 0, outputs = 0;
  if (c.op == Operation::kSparsePrefill) {
    const PrefillShape& p = c.prefill;
    inputs =
        d(p.s_q) * d(p.h_q) * d(p.d_qk) * 2 + d(p.s_kv) * d(p.d_qk) * 2 + d(p.s_q) * d(p.topk) * 4;
    outputs = d(p.s_q) * d(p.h_q) * (512 * 2 + 4 + 4);
  } else {
    const DecodeShape& s = c.decode;
    const int d_qk = s.d_qk();
    const verify::DecodeCacheBlocks blocks = verify::decode_cache_blocks(decode_recipe(s, seed));
    auto cache = [&](KvCacheFormat format, KvLayout layout, int64_t num_blocks, int64_t page) {
      return d(num_blocks) * d(kv_cache_min_block_stride(format, page, d_qk, layout));
    };
    const double queries = d(s.b) * d(s.s_q);
    inputs = queries * d(s.h_q) * d_qk * 2 +
             cache(s.format, s.kv_layout, blocks.main, s.page_block_size) + queries * d(s.topk) * 4;
    if (s.has_extra) {
      inputs += cache(s.extra(), s.extra_kv_layout, blocks.extra, s.extra_page_block_size) +
                queries * d(s.extra_topk) * 4;
    }
    outputs = queries * d(s.h_q) * (512 * 2 + 4);
  }
  CaseBytes b;
  // Host: the data, and the outputs three times (the run's or the fetched copy, and the
  // reference's in fp32, counted as two bf16-sized copies).
  b.host = inputs + 3 * outputs;
  if (on_cuda) b.device = inputs + outputs;
  return b;
}

Status check_case_fits(const BenchCase& c, uint64_t seed, Device device) {
  const CaseBytes need = case_bytes(c, seed, device.is_cuda());
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  const double host = pages > 0 && page_size > 0 ? static_cast<double>(pages) * page_size : 0;
  auto text = [](double bytes) {
    std::ostringstream os;
    os << std::setprecision(3) << bytes / (1024.0 * 1024 * 1024) << " GiB (" << std::fixed
       << std::setprecision(0) << bytes << " bytes)";
    return os.str();
  };
  if (host > 0 && need.host > host) {
    return invalid_argument("case " + c.name() + " needs " + text(need.host) +
                            " of host memory for its tensors, more than this machine's " +
                            text(host));
  }
  if (device.is_cuda()) {
    DeviceInfo info;
    if (get_device_info(device.index, &info).ok() && info.memory_bytes > 0 &&
        need.device > static_cast<double>(info.memory_bytes)) {
      return invalid_argument(
          "case " + c.name() + " needs " + text(need.device) +
          " of device memory for its tensors, more than cuda:" + std::to_string(device.index) +
          "'s " + text(static_cast<double>(info.memory_bytes)));
    }
  }
  return {};
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace sparse_mla::cli::bench
