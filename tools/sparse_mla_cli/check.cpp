// `sparse-mla check`: N random cases of the SPEC §5 test recipe (random shapes, cache formats and
// page layouts, V4.1's mixed main/extra formats, page sizes, lengths, sinks, invalid indices,
// NaN-poisoned rows, padded strides) run on a back
// end and compared with the reference; one line per case, a summary, exit 1 on any failure.
// Case i uses seed S + i, so `--cases 1 --seed S+i` reruns it alone.
#include <iostream>
#include <random>
#include <sstream>

#include "case_runner.h"
#include "commands.h"
#include "flags.h"
#include "reference_check.h"
#include "sparse_mla/sparse_mla.h"

namespace sparse_mla::cli {

namespace {

// Shapes from SPEC §5's list, kept small enough that the double reference takes milliseconds.
constexpr int64_t kHeads[] = {1, 3, 8, 16, 32, 64, 128};
constexpr int64_t kTopks[] = {1, 37, 64, 100, 128, 200};
constexpr int64_t kPageSizes[] = {1, 2, 53, 61, 64, 69, 576};

template <typename T, size_t N>
T pick(std::mt19937_64& rng, const T (&options)[N]) {
  return options[std::uniform_int_distribution<size_t>(0, N - 1)(rng)];
}

bool chance(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

int64_t between(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Every optional feature of the recipe is on most of the time (p = 3/4): the combinations matter.
constexpr double kFeatureOdds = 0.75;

verify::PrefillRecipe random_prefill(std::mt19937_64& rng, uint64_t seed) {
  verify::PrefillRecipe r;
  r.s_q = between(rng, 1, 12);
  r.h_q = pick(rng, kHeads);
  r.d_qk = chance(rng, 0.5) ? 512 : 576;
  r.topk = pick(rng, kTopks);
  // Sometimes fewer kv rows than topk (SPEC §5).
  r.s_kv = chance(rng, 0.25) ? between(rng, 1, r.topk) : between(rng, 1, 600);
  r.attn_sink = chance(rng, kFeatureOdds);
  r.topk_length = chance(rng, kFeatureOdds);
  r.padded_strides = chance(rng, kFeatureOdds);
  r.invalid_indices = chance(rng, kFeatureOdds);
  r.empty_queries = chance(rng, kFeatureOdds);
  r.poison_unused_rows = chance(rng, kFeatureOdds);
  r.seed = seed;
  return r;
}

verify::DecodeRecipe random_decode(std::mt19937_64& rng, uint64_t seed) {
  verify::DecodeRecipe r;
  r.b = between(rng, 1, 6);
  r.s_q = between(rng, 1, 4);
  r.h_q = pick(rng, kHeads);
  r.topk = pick(rng, kTopks);
  const KvCacheFormat formats[] = {KvCacheFormat::kV32Fp8, KvCacheFormat::kV4Fp8,
                                   KvCacheFormat::kBf16};
  r.format = pick(rng, formats);
  r.d_qk = r.format == KvCacheFormat::kBf16 ? (chance(rng, 0.5) ? 512 : 576) : 0;
  r.page_block_size = pick(rng, kPageSizes);
  r.topk_length = chance(rng, kFeatureOdds);
  r.topk_length_per_token = chance(rng, 0.5);
  r.attn_sink = chance(rng, kFeatureOdds);
  r.extra_cache = chance(rng, 0.5);
  r.extra_topk = pick(rng, kTopks);
  r.extra_page_block_size = pick(rng, kPageSizes);
  r.extra_topk_length = chance(rng, kFeatureOdds);
  r.extra_topk_length_per_token = chance(rng, 0.5);
  r.padded_strides = chance(rng, kFeatureOdds);
  r.invalid_indices = chance(rng, kFeatureOdds);
  r.empty_queries = chance(rng, kFeatureOdds);
  r.poison_unused_rows = chance(rng, kFeatureOdds);
  // DeepSeek V4.1's records in either layout (drawn last: the draws above stay those of a seed
  // without them): a v41_fp8 main cache mostly, with a v41_fp8 or v41_fp4 extra cache.
  if (chance(rng, 0.4)) {
    const KvLayout layouts[] = {KvLayout::kPageSplit, KvLayout::kTokenInterleaved};
    r.format = chance(rng, 0.8) ? KvCacheFormat::kV41Fp8 : KvCacheFormat::kV41Fp4;
    r.d_qk = 0;
    r.kv_layout = pick(rng, layouts);
    r.extra_format =
        r.format == KvCacheFormat::kV41Fp8 && chance(rng, 0.6) ? KvCacheFormat::kV41Fp4 : r.format;
    r.extra_kv_layout = pick(rng, layouts);
  }
  // Draft tokens sharing 50-90 % of their request's indices (drawn last, as above).
  if (r.s_q > 1 && chance(rng, 0.3)) {
    r.shared_indices = std::uniform_real_distribution<double>(0.5, 0.9)(rng);
  }
  r.seed = seed;
  return r;
}

std::string describe(const verify::PrefillRecipe& r) {
  std::ostringstream os;
  os << "prefill s_q=" << r.s_q << " s_kv=" << r.s_kv << " h_q=" << r.h_q << " d_qk=" << r.d_qk
     << " topk=" << r.topk << (r.topk_length ? " topk_length" : "") << (r.attn_sink ? " sink" : "")
     << (r.padded_strides ? " padded" : "") << (r.invalid_indices ? " invalid" : "")
     << (r.empty_queries ? " empty" : "") << (r.poison_unused_rows ? " poison" : "");
  return os.str();
}

std::string describe(const verify::DecodeRecipe& r) {
  std::ostringstream os;
  os << "decode " << kv_cache_format_name(r.format);
  if (r.kv_layout != KvLayout::kDefault) os << " " << kv_layout_name(r.kv_layout);
  os << " b=" << r.b << " s_q=" << r.s_q << " h_q=" << r.h_q
     << (r.d_qk ? " d_qk=" + std::to_string(r.d_qk) : "") << " topk=" << r.topk
     << " page_block_size=" << r.page_block_size;
  if (r.topk_length) os << (r.topk_length_per_token ? " topk_length[b,s_q]" : " topk_length[b]");
  if (r.extra_cache) {
    if (r.extra_format) os << " extra_format=" << kv_cache_format_name(*r.extra_format);
    if (r.extra_kv_layout != KvLayout::kDefault) {
      os << " extra_kv_layout=" << kv_layout_name(r.extra_kv_layout);
    }
    os << " extra_topk=" << r.extra_topk << " extra_page_block_size=" << r.extra_page_block_size;
    if (r.extra_topk_length) {
      os << (r.extra_topk_length_per_token ? " extra_topk_length[b,s_q]" : " extra_topk_length[b]");
    }
  }
  if (r.shared_indices > 0) os << " shared_indices=" << r.shared_indices;
  os << (r.attn_sink ? " sink" : "") << (r.padded_strides ? " padded" : "")
     << (r.invalid_indices ? " invalid" : "") << (r.empty_queries ? " empty" : "")
     << (r.poison_unused_rows ? " poison" : "");
  return os.str();
}

// Runs one case; fills `line` with what to print and returns whether it passed.
bool run_one(bool prefill, std::mt19937_64& rng, uint64_t seed, Device device,
             const RunOptions& options, std::string* line) {
  VerifyResult v;
  Status st;
  std::string kernel;
  if (prefill) {
    verify::PrefillRecipe r = random_prefill(rng, seed);
    *line = describe(r);
    verify::PrefillCase c;
    PrefillRunner runner;
    verify::PrefillOutputs got;
    if ((st = verify::make_prefill_case(r, &c)).ok() &&
        (st = runner.prepare(c, device, options)).ok() && (st = runner.run()).ok() &&
        (st = runner.fetch(&got)).ok()) {
      kernel = runner.kernel();
      st = verify_prefill(c, got, 1, &v);
    }
  } else {
    verify::DecodeRecipe r = random_decode(rng, seed);
    *line = describe(r);
    verify::DecodeCase c;
    DecodeRunner runner;
    verify::DecodeOutputs got;
    if ((st = verify::make_decode_case(r, &c)).ok() &&
        (st = runner.prepare(c, device, options)).ok() && (st = runner.run()).ok() &&
        (st = runner.fetch(&got)).ok()) {
      kernel = runner.kernel();
      st = verify_decode(c, got, 1, 1, &v);
    }
  }
  if (!st.ok()) {
    *line += ": ERROR " + st.message();
    return false;
  }
  *line += ": " + std::string(v.ok ? "pass" : "FAIL") + " [" + kernel + "] " + v.message;
  return v.ok;
}

}  // namespace

int check_command(const Invocation& inv) {
  int64_t cases = 20, seed = 1, threads = 0;
  std::string backend_flag = "auto", op, kernel;
  FlagSet f("check");
  f.add_int("cases", &cases, "number of random cases", 1, 1000000);
  f.add_int("seed", &seed, "seed of the first case (case i uses seed + i)", 0, INT64_MAX / 2);
  f.add_string("backend", &backend_flag, "back end under test",
               {std::begin(kBackendChoices), std::end(kBackendChoices)});
  f.add_string("op", &op, "only this operation; both when not given", {"prefill", "decode"});
  f.add_int("threads", &threads, "CPU back end threads; 0 = all", 0, 4096);
  f.add_string("kernel", &kernel, "force one kernel variant by name");
  if (Status st = f.parse(inv.args); !st.ok()) {
    std::cerr << "sparse-mla check: " << st.message() << "\n";
    return kExitUsageError;
  }
  if (f.help_requested()) {
    std::cout << "usage: sparse-mla check [flags]\n"
              << "Runs random SPEC §5 test-recipe cases on a back end against the reference.\n\n"
              << f.usage();
    return kExitOk;
  }
  const Backend backend = resolve_backend(*parse_backend(backend_flag));
  if (backend == Backend::kCuda && !cuda_available()) {
    std::cerr << "sparse-mla check: --backend = cuda but no CUDA device is available to this "
                 "build\n";
    return kExitFailure;
  }
  if (Status st = check_kernel_flag(kernel, backend); !st.ok()) {
    std::cerr << "sparse-mla check: " << st.message() << "\n";
    return kExitUsageError;
  }
  RunOptions options;
  options.backend = backend;
  options.num_threads = static_cast<int>(threads);
  options.kernel = kernel;
  const Device device = device_for(backend);

  int64_t failed = 0;
  for (int64_t i = 0; i < cases; ++i) {
    const uint64_t case_seed = static_cast<uint64_t>(seed + i);
    std::mt19937_64 rng(case_seed);
    const bool prefill = op.empty() ? chance(rng, 0.5) : op == "prefill";
    std::string line;
    bool ok = run_one(prefill, rng, case_seed, device, options, &line);
    failed += ok ? 0 : 1;
    std::cout << "case " << i + 1 << "/" << cases << " seed " << case_seed << " "
              << backend_name(backend) << ": " << line << "\n";
    if (!ok) {
      std::cout << "  rerun: sparse-mla check --cases 1 --seed " << case_seed << " --backend "
                << backend_name(backend) << (op.empty() ? "" : " --op " + op)
                << (kernel.empty() ? "" : " --kernel " + shell_join({kernel}))
                << (threads > 0 ? " --threads " + std::to_string(threads) : "") << "\n";
    }
    std::cout.flush();
  }
  std::cout << cases << " cases on " << backend_name(backend) << ": " << cases - failed
            << " passed, " << failed << " failed\n";
  return failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace sparse_mla::cli
