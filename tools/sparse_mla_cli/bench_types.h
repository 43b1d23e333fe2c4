// What `sparse-mla bench` works with: its settings (the flags, declared in bench.cpp), the
// ceilings every row is reported against, and the result of one case. Shared by the run
// (bench_run.h), the terminal report (bench_report.h) and the JSON record (bench_json.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cache_flags.h"
#include "flops.h"
#include "gemm_ceiling.h"
#include "reference_check.h"
#include "suites.h"

namespace sparse_mla::cli::bench {

// How a case's runs are timed (--timing).
enum class Timing {
  // Runs queued back to back behind the L2-flush fill, CUDA events around each (CPU: the wall
  // time of each call). The fill hides host time up to its own length: this is device time.
  kQueued,
  // One call at a time: synchronise, time the call's host wall (API call to return), and its
  // device time with CUDA events, the launches held behind a host gate so that no host time
  // enters the events. On the CPU back end the call does its work before it returns, so the
  // device time is the wall time.
  kIsolated,
};

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
  std::string timing = "queued";
  double time_budget = 1.0;
  std::string json_path;
  bool list_cases = false;
  int64_t gemm_n = kGemmN;
  // A single case given by flags (--op set; write_kv_cache: the cache writer, --n rows).
  std::string op;
  int64_t b = 1, s_q = 0, s_kv = 0, h_q = 0, d_qk = 0, topk = 0, page_block_size = 64;
  CacheFlags caches;  // --format, --kv_layout, --extra_format, --extra_kv_layout
  int64_t extra_topk = 0, extra_page_block_size = 64, extra_s_kv = 0;
  double shared_indices = 0;  // decode: draft tokens' share of their request's token-0 indices
  int64_t n = 0;

  Timing timing_mode() const { return timing == "isolated" ? Timing::kIsolated : Timing::kQueued; }
};

struct Ceilings {
  double flop_per_s = 0;  // 0 = not known
  double bytes_per_s = 0;
  std::string flop_source, bytes_source;
};

// Isolated-call timing of one case (--timing isolated): per call, medians over the runs.
struct IsolatedTimes {
  std::vector<double> host_ms;    // host wall of each call, API call to return
  std::vector<double> device_ms;  // device time of each call (CPU: = host_ms)
  double median_host_ms = NAN, median_device_ms = NAN;
  bool device_is_host = false;  // CPU back end: the device time is the host wall time
  // The latency of one call: host + device on CUDA, the wall time on the CPU.
  double median_sum_ms() const {
    return device_is_host ? median_host_ms : median_host_ms + median_device_ms;
  }
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
  // --timing isolated: isolated_times holds the times; ms holds each run's host + device time
  // (CPU: its wall time), median_ms their median.
  bool isolated = false;
  IsolatedTimes isolated_times;
  WorkCount work;
  bool verified = false;
  VerifyResult verify;
  double make_s = 0, verify_s = 0;
  double gemm_after = 0;  // CPU: the GEMM rate sampled right after this case (load context)
};

double median(std::vector<double> v);

}  // namespace sparse_mla::cli::bench
