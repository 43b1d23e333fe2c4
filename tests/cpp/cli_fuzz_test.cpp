// Argument fuzzing of every `sparse-mla` sub-command: generated argument vectors (known and
// unknown flags, `--name value` and `--name=value`, values empty, negative, huge, not numbers,
// choices and non-choices, switches with values, stray words) run the built tool under
// `timeout`. Each run must end with exit 0, 1 (a run that failed: no CUDA device, a case that
// errored) or 2 (refused flags), and a non-zero exit must say why on the terminal; never a
// crash or an abort (exit >= 128: a signal) and never a hang (the timeout's 124). Seeds are fixed:
// a failure names its command line, which reruns it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kRunsPerCommand = 30;  // 7 commands: 210 runs, a few seconds
constexpr int kTimeoutSeconds = 60;

struct Command {
  const char* name;
  // Flags always given first (later ones override them): keep runs short, e.g. a tiny case
  // instead of bench's default suite; the fuzzed flags come after.
  std::vector<std::string> base;
  std::vector<std::string> flags;     // flags that take a value
  std::vector<std::string> switches;  // flags that take none
};

std::vector<Command> commands() {
  const std::vector<std::string> shape = {"b",
                                          "s_q",
                                          "s_kv",
                                          "h_q",
                                          "d_qk",
                                          "topk",
                                          "format",
                                          "kv_layout",
                                          "page_block_size",
                                          "extra_topk",
                                          "extra_format",
                                          "extra_kv_layout",
                                          "extra_page_block_size"};
  std::vector<std::string> bench_flags = {
      "suite",   "backend", "scale",  "filter",       "iters",       "warmup",          "seed",
      "threads", "kernel",  "verify", "verify_gflop", "time_budget", "decode_schedule", "timing",
      "json",    "gemm_n",  "op",     "extra_s_kv",   "n",           "shared_indices"};
  bench_flags.insert(bench_flags.end(), shape.begin(), shape.end());
  std::vector<std::string> list_flags = {"op", "topk_length", "extra_topk_length"};
  list_flags.insert(list_flags.end(), shape.begin(), shape.end());
  return {
      {"bench",
       {"--op",   "decode", "--b",     "1", "--s_q",    "1", "--s_kv",   "64", "--h_q",    "2",
        "--topk", "4",      "--iters", "1", "--warmup", "0", "--gemm_n", "64", "--verify", "off"},
       bench_flags,
       {"list_cases", "help"}},
      {"check",
       {"--cases", "1"},
       {"cases", "seed", "backend", "op", "threads", "kernel"},
       {"help"}},
      {"list", {}, list_flags, {"attn_sink", "help"}},
      {"info", {"--no_measure"}, {"gemm_n"}, {"no_measure", "help"}},
      {"overhead",
       {"--calls", "5", "--batches", "1"},
       {"calls", "batches", "backend", "threads", "json"},
       {"no_tiny", "help"}},
      {"version", {}, {}, {"help"}},
      {"help", {}, {}, {"help"}},
  };
}

// Values: a few valid small ones, the edges of every flag's range and beyond, non-numbers,
// choices of other flags, and words that look like flags.
const std::vector<std::string>& values() {
  static const std::vector<std::string> v = {"0",
                                             "1",
                                             "2",
                                             "3",
                                             "-1",
                                             "-7",
                                             "64",
                                             "1.5",
                                             "1e3",
                                             "",
                                             "abc",
                                             "nan",
                                             "inf",
                                             "99999999999999999999",
                                             "1099511627776",
                                             "-9223372036854775808",
                                             "0x10",
                                             " 1",
                                             "1 ",
                                             "cpu",
                                             "cuda",
                                             "auto",
                                             "reference",
                                             "tpu",
                                             "prefill",
                                             "decode",
                                             "v4_fp8",
                                             "v32_fp8",
                                             "bf16",
                                             "v41_fp8",
                                             "v41_fp4",
                                             "page_split",
                                             "token_interleaved",
                                             "write_kv_cache",
                                             "v41",
                                             "fp4",
                                             "isolated",
                                             "queued",
                                             "reuse",
                                             "build",
                                             "full",
                                             "subset",
                                             "off",
                                             "none",
                                             "request",
                                             "token",
                                             "v4",
                                             "all",
                                             "tp-shards",
                                             "bogus",
                                             "cpu_sparse_decode",
                                             "cpu_sparse_prefill",
                                             "--help",
                                             "--",
                                             "-",
                                             "x y",
                                             "'q'",
                                             "/nonexistent/dir/out.json"};
  return v;
}

std::string quote(const std::string& word) {
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliResult {
  int status = -1;  // the shell's exit status: 124 = timeout, >= 128 = killed by a signal
  std::string output;
};

CliResult run_tool(const std::vector<std::string>& argv, const std::string& json_path) {
  std::string line = "cd " + quote(std::filesystem::temp_directory_path().string()) +
                     " && timeout " + std::to_string(kTimeoutSeconds) + " " + quote(SMLA_CLI_PATH);
  for (const std::string& a : argv) line += " " + quote(a == "@json" ? json_path : a);
  line += " 2>&1";
  CliResult r;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::vector<std::string> generate(const Command& c, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> argv = {c.name};
  argv.insert(argv.end(), c.base.begin(), c.base.end());
  for (int n = static_cast<int>(pick(5)); n > 0; --n) {
    const size_t kind = pick(10);
    if (kind < 6 && !c.flags.empty()) {
      const std::string& flag = c.flags[pick(c.flags.size())];
      // --json gets a writable path most of the time (and the fuzz values otherwise).
      const std::string value =
          flag == "json" && pick(2) == 0 ? "@json" : values()[pick(values().size())];
      if (pick(3) == 0) {
        argv.push_back("--" + flag + "=" + value);
      } else {
        argv.push_back("--" + flag);
        if (pick(8) != 0) argv.push_back(value);  // sometimes the value is missing
      }
    } else if (kind < 8 && !c.switches.empty()) {
      const std::string& flag = c.switches[pick(c.switches.size())];
      argv.push_back(pick(4) == 0 ? "--" + flag + "=1" : "--" + flag);
    } else if (kind == 8) {
      argv.push_back("--no_such_flag");
      if (pick(2) == 0) argv.push_back("1");
    } else {
      argv.push_back(values()[pick(values().size())]);  // a stray word
    }
  }
  return argv;
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s = "sparse-mla";
  for (const std::string& a : argv) s += " " + quote(a);
  return s;
}

TEST(CliFuzz, EveryCommandExitsCleanlyOnGeneratedArguments) {
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("smla_cli_fuzz_" + std::to_string(getpid()) + ".json"))
                                    .string();
  int refused = 0, ran = 0;
  for (const Command& c : commands()) {
    for (int i = 0; i < kRunsPerCommand; ++i) {
      std::mt19937_64 rng(0xf022u * 1000 + i + 100 * static_cast<uint64_t>(c.name[0]));
      const std::vector<std::string> argv = generate(c, rng);
      const CliResult r = run_tool(argv, json_path);
      SCOPED_TRACE(joined(argv));
      EXPECT_NE(r.status, 124) << "hung (killed after " << kTimeoutSeconds << " s)";
      EXPECT_LT(r.status, 128) << "crashed or aborted:\n" << r.output;
      EXPECT_TRUE(r.status == 0 || r.status == 1 || r.status == 2) << "exit " << r.status << ":\n"
                                                                   << r.output;
      if (r.status != 0) {
        EXPECT_NE(r.output.find("sparse-mla"), std::string::npos) << "a failure must say why:\n"
                                                                  << r.output;
      }
      (r.status == 2 ? refused : ran) += 1;
    }
  }
  std::filesystem::remove(json_path);
  std::printf("cli fuzz: %d runs refused (exit 2), %d ran\n", refused, ran);
  // Both branches taken: the base flags run, the fuzzed ones are often refused.
  EXPECT_GT(refused, 10);
  EXPECT_GT(ran, 10);
}

}  // namespace
