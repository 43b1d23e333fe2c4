// `sparse-mla bench`: runs benchmark suites (suites.h) or one case given by flags on a back end,
// verifies every case against the reference, and prints time, FLOP/s, bytes/s, the two floors
// (FLOPs / peak, bytes / bandwidth), the share of the ceiling and the ratio to FlashMLA's anchor;
// `--json FILE` records every number with the command line, commit and machine.
// This file holds the flags and the command; a case's run and timing are in bench_run.h, the
// terminal report in bench_report.h, the JSON record in bench_json.h, the ceilings in
// bench_ceilings.h.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench_ceilings.h"
#include "bench_json.h"
#include "bench_report.h"
#include "bench_run.h"
#include "bench_types.h"
#include "bench_writer.h"
#include "case_runner.h"
#include "commands.h"
#include "flags.h"
#include "json_file.h"
#include "machine.h"
#include "table.h"

namespace sparse_mla::cli {

namespace bench {
namespace {

// The CPU default scale keeps the default suite under a minute on a 2-core machine: measured
// 20 s (idle) to 53 s (load ~7 from other jobs) on the project's shared 2-core VM, verification
// included. A GPU runs full size.
constexpr double kCpuDefaultScale = 0.01;

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
  f->add_string("timing", &s->timing,
                "queued: runs back to back behind the L2-flush fill (device time; hides host "
                "time); isolated: one call at a time, host wall + device time per call",
                {"queued", "isolated"});
  f->add_path("json", &s->json_path, "write every number to this JSON file");
  f->add_switch("list_cases", &s->list_cases,
                "print each selected case as the flags that run it alone, and exit");
  f->add_int("gemm_n", &s->gemm_n, "CPU: size of the fp32 GEMM that measures the ceiling", 64,
             8192);
  f->add_string("op", &s->op,
                "run one case given by the flags below instead of suites (write_kv_cache: the "
                "cache writer on --n rows of --format)",
                {"prefill", "decode", "write_kv_cache"});
  f->add_int("n", &s->n, "write_kv_cache: rows written per call", 1, 1 << 24);
  f->add_int("b", &s->b, "decode: requests", 1, 1 << 20);
  f->add_int("s_q", &s->s_q, "query tokens (prefill) / per request (decode)", 1, 1 << 24);
  f->add_int("s_kv", &s->s_kv, "prefill: kv rows; decode: mean cache tokens per request", 1,
             int64_t{1} << 31);
  f->add_int("h_q", &s->h_q, "query heads", 1, 128);
  f->add_int("d_qk", &s->d_qk, "prefill: 512 or 576 (decode: the format's; bf16: 576 or 512)", 512,
             576);
  f->add_int("topk", &s->topk, "index slots per query", 1, 1 << 20);
  s->caches.declare(f, "v4_fp8");
  f->add_int("page_block_size", &s->page_block_size, "decode: tokens per page block", 1, 1 << 16);
  f->add_int("extra_topk", &s->extra_topk, "decode: slots of the extra cache; 0 = no extra cache",
             0, 1 << 20);
  f->add_int("extra_page_block_size", &s->extra_page_block_size, "decode: extra cache page size", 1,
             1 << 16);
  f->add_int("extra_s_kv", &s->extra_s_kv,
             "decode: mean extra cache tokens per request (0 = --s_kv)", 0, int64_t{1} << 31);
  f->add_double("shared_indices", &s->shared_indices,
                "decode: each entry of a draft token's (s >= 1) index lists is its request's "
                "token-0 entry with this probability (MTP verification's overlap; 0 = none)",
                0.0, 1.0);
  f->set_default_text("scale", "");
  for (const char* needed_with_op : {"s_q", "s_kv", "h_q", "d_qk", "topk", "n"}) {
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
    if (f.was_set("shared_indices")) {
      return invalid_argument("--shared_indices is a decode flag (draft tokens of one request)");
    }
    c->op = Operation::kSparsePrefill;
    c->prefill = {s.s_q, s.s_kv, s.h_q, s.d_qk, s.topk};
    return {};
  }
  c->op = Operation::kSparseDecode;
  ResolvedCaches caches;
  SMLA_RETURN_IF_ERROR(resolve(s.caches, f, s.extra_topk > 0, &caches));
  const KvCacheFormat format = caches.format;
  // A decode case runs the format's d_qk (bf16: 576, or 512 by --d_qk): a different --d_qk is
  // refused, not ignored.
  const bool bf16 = format == KvCacheFormat::kBf16;
  const int64_t format_d_qk = bf16 ? 576 : kv_cache_format_info(format).d_qk;
  if (f.was_set("d_qk") && s.d_qk != format_d_qk && !(bf16 && s.d_qk == 512)) {
    return invalid_argument("--d_qk = " + std::to_string(s.d_qk) + " does not match --format " +
                            s.caches.format + ", whose d_qk is " + std::to_string(format_d_qk) +
                            (bf16 ? " or 512" : ""));
  }
  if (f.was_set("extra_s_kv") && s.extra_topk == 0) {
    return invalid_argument("--extra_s_kv needs --extra_topk (an extra cache)");
  }
  if (s.shared_indices > 0 && s.s_q < 2) {
    return invalid_argument("--shared_indices = " + shared_indices_text(s.shared_indices) +
                            " needs --s_q >= 2: it is the overlap of a request's draft tokens");
  }
  DecodeShape& d = c->decode;
  d.b = s.b;
  d.s_q = s.s_q;
  d.h_q = s.h_q;
  d.topk = s.topk;
  d.format = format;
  d.kv_layout = caches.kv_layout;
  d.page_block_size = s.page_block_size;
  d.s_kv = s.s_kv;
  d.has_extra = s.extra_topk > 0;
  d.extra_format = caches.extra_format;
  d.extra_kv_layout = caches.extra_kv_layout;
  d.extra_topk = s.extra_topk;
  d.extra_page_block_size = d.has_extra ? s.extra_page_block_size : 0;
  d.extra_s_kv = d.has_extra ? (s.extra_s_kv > 0 ? s.extra_s_kv : s.s_kv) : 0;
  d.shared_indices = s.shared_indices;
  if (bf16 && f.was_set("d_qk")) d.bf16_d_qk = static_cast<int>(s.d_qk);
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
    for (const char* shape : {"b", "s_q", "s_kv", "h_q", "d_qk", "topk", "format", "kv_layout",
                              "page_block_size", "extra_topk", "extra_format", "extra_kv_layout",
                              "extra_page_block_size", "extra_s_kv", "shared_indices", "n"}) {
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
}  // namespace
}  // namespace bench

int bench_command(const Invocation& inv) {
  using namespace bench;
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
  if (s.op == "write_kv_cache") {
    if (flags.was_set("suite")) {
      std::cerr << "sparse-mla bench: --suite and --op exclude each other\n";
      return kExitUsageError;
    }
    return writer_bench(s, flags, inv.argv);
  }
  if (flags.was_set("n")) {
    std::cerr << "sparse-mla bench: --n is the row count of --op write_kv_cache\n";
    return kExitUsageError;
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
  if (Status st = check_kernel_flag(s.kernel, backend); !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitUsageError;
  }
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
  if (s.timing != "queued") suffix += " --timing " + s.timing;

  if (s.list_cases) {
    for (const BenchCase& c : cases) {
      std::cout << "sparse-mla bench " << shell_join(c.flags()) << suffix << "\n";
    }
    return kExitOk;
  }

  // Before minutes of ceilings and runs: refuse a case whose tensors cannot fit.
  for (const BenchCase& c : cases) {
    if (Status st = check_case_fits(c.scaled(s.scale), s.seed, device); !st.ok()) {
      std::cerr << "sparse-mla bench: " << st.message() << "\n";
      return kExitUsageError;
    }
  }

  // A run can take minutes on a GPU: find out now, not after it, that --json cannot be written.
  if (!s.json_path.empty() && !json_file_writable("bench", s.json_path)) return kExitUsageError;

  RunOptions options;
  options.backend = backend;
  options.num_threads = static_cast<int>(s.threads);
  options.kernel = s.kernel;

  const MachineInfo machine = describe_machine();
  const SourceInfo source = describe_source();
  std::cerr << "measuring the ceilings ...\n";
  const bool on_host = backend != Backend::kCuda;
  HostCeilings host_ceilings(s.gemm_n);
  nlohmann::ordered_json ceil_record;
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
  print_table(results, backend, ceil, s.timing_mode());
  const std::vector<HeadRatio> ratios = head_ratios(results);
  const std::vector<StorageRatio> storage = storage_ratios(results);
  print_summaries(results, backend, ceil, ratios, storage);
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
    RunRecord record;
    record.command = shell_join(inv.argv);
    record.reproduce = s.op.empty()
                           ? "sparse-mla bench --suite " + s.suite + suffix +
                                 (s.filter.empty() ? "" : " --filter " + shell_join({s.filter}))
                           : "sparse-mla bench " + shell_join(cases.front().flags()) + suffix;
    record.suffix = suffix;
    record.settings = &s;
    record.backend = backend;
    record.machine = machine;
    record.source = source;
    record.ceilings_record = ceil_record;
    record.ceilings = ceil;
    record.results = &results;
    record.ratios = ratios;
    record.storage = storage;
    record.total_seconds = total_s;
    record.all_ok = all_ok;
    if (!write_json_file("bench", s.json_path, run_json(record))) return kExitFailure;
    std::cerr << "wrote " << s.json_path << "\n";
  }
  return all_ok ? kExitOk : kExitFailure;
}

}  // namespace sparse_mla::cli
