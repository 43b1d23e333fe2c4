// Runs the built `sparse-mla` binary (path from CMake: SMLA_CLI_PATH) the way a user would, and
// checks exit codes, output and the JSON result file — including that bench counts FLOPs and
// bytes with docs/flashmla_baseline.md's formulas.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "sparse_mla/runtime.h"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  const std::string command = std::string("'") + SMLA_CLI_PATH + "' " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string temp_json(const char* tag) {
  return (std::filesystem::temp_directory_path() /
          ("smla_cli_test_" + std::string(tag) + "_" + std::to_string(getpid()) + ".json"))
      .string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// `sparse-mla bench FLAGS --json <temp file>`: the run and the file's JSON (null when the run
// failed or wrote nothing); the file is removed.
struct BenchRun {
  CliRun cli;
  nlohmann::json json;
};

BenchRun run_bench(const std::string& flags, const char* tag) {
  const std::string path = temp_json(tag);
  BenchRun r;
  r.cli = run_cli("bench " + flags + " --json " + path);
  if (r.cli.exit_code == 0 && std::filesystem::exists(path)) r.json = read_json(path);
  std::filesystem::remove(path);
  return r;
}

TEST(Cli, InfoPrintsTheMachine) {
  CliRun r = run_cli("info");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cpu: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hardware threads"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cuda devices: "), std::string::npos) << r.output;
}

TEST(Cli, ListSaysWhichKernelsCanRunAProblem) {
  CliRun r = run_cli("list --op decode --h_q 16 --format v4_fp8 --topk 128 --extra_topk 512");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cpu_sparse_decode"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("decode plans:"), std::string::npos) << r.output;
}

TEST(Cli, CheckRunsRandomCasesAgainstTheReference) {
  CliRun r = run_cli("check --cases 5 --seed 3 --backend cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("5 passed, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("case 5/5 seed 7"), std::string::npos) << r.output;
}

TEST(Cli, BadFlagsNameTheFlagAndExitWithTwo) {
  CliRun unknown = run_cli("bench --no_such_flag 1");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--no_such_flag"), std::string::npos) << unknown.output;

  CliRun not_a_number = run_cli("bench --scale abc");
  EXPECT_EQ(not_a_number.exit_code, 2) << not_a_number.output;
  EXPECT_NE(not_a_number.output.find("--scale = 'abc'"), std::string::npos) << not_a_number.output;

  CliRun out_of_range = run_cli("list --h_q 0");
  EXPECT_EQ(out_of_range.exit_code, 2) << out_of_range.output;
  EXPECT_NE(out_of_range.output.find("--h_q = 0"), std::string::npos) << out_of_range.output;

  CliRun bad_choice = run_cli("check --backend tpu");
  EXPECT_EQ(bad_choice.exit_code, 2) << bad_choice.output;
  EXPECT_NE(bad_choice.output.find("'tpu'"), std::string::npos) << bad_choice.output;

  CliRun unknown_command = run_cli("benchmark");
  EXPECT_EQ(unknown_command.exit_code, 2) << unknown_command.output;
}

TEST(Cli, UnwritableJsonPathFailsBeforeTheRun) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "smla_no_such_dir" / "out.json").string();
  // Every command that writes --json after a run: the suites' bench, the cache writer's, overhead.
  for (const std::string& command :
       {std::string("bench --op prefill --d_qk 576 --h_q 4 --topk 8 --s_q 2 --s_kv 64 --iters 1"),
        std::string("bench --op write_kv_cache --format v41_fp4 --n 16 --iters 1"),
        std::string("overhead --calls 10 --batches 1")}) {
    CliRun r = run_cli(command + " --json " + path);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_NE(r.output.find("cannot write --json"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("measuring the ceilings"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("host us/call"), std::string::npos) << r.output;
  }
}

TEST(Cli, CudaBackendWithoutADeviceFails) {
  if (sparse_mla::cuda_available()) GTEST_SKIP() << "a CUDA device is visible";
  CliRun r = run_cli("check --cases 1 --backend cuda");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no CUDA device"), std::string::npos) << r.output;
}

TEST(Cli, BenchPrefillCaseWritesCountedVerifiedJson) {
  BenchRun run = run_bench(
      "--backend cpu --op prefill --s_q 4 --s_kv 300 --h_q 16 --d_qk 576 --topk 64 --iters 3",
      "prefill");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  const nlohmann::json& j = run.json;
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_FALSE(j["git_commit"].get<std::string>().empty());
  EXPECT_NE(j["command"].get<std::string>().find("--json"), std::string::npos);
  EXPECT_EQ(j["reproduce"],
            "sparse-mla bench --op prefill --s_q 4 --s_kv 300 --h_q 16 --d_qk 576 --topk 64 "
            "--backend cpu --seed 1 --iters 3");
  EXPECT_FALSE(j["machine"]["cpu_model"].get<std::string>().empty());
  EXPECT_GT(j["ceilings"]["bytes_per_s"].get<double>(), 0);
  ASSERT_EQ(j["cases"].size(), 1u);
  const nlohmann::json& c = j["cases"][0];
  EXPECT_EQ(c["kernel"], "cpu_sparse_prefill");
  EXPECT_EQ(c["times_ms"].size(), 3u);
  EXPECT_GT(c["median_ms"].get<double>(), 0);
  // Every index valid, no topk_length: attended = valid_slots = s_q * topk.
  const double attended = 4.0 * 64;
  EXPECT_DOUBLE_EQ(c["flop"].get<double>(), 2 * attended * 16 * (576 + 512));
  EXPECT_DOUBLE_EQ(c["bytes"].get<double>(), attended * 576 * 2 + 4.0 * 16 * (576 + 512) * 2);
  EXPECT_TRUE(c["verify"]["ok"].get<bool>()) << c["verify"]["message"];
  EXPECT_EQ(c["verify"]["checked"], 4);
  EXPECT_TRUE(j["all_ok"].get<bool>());
}

TEST(Cli, BenchScaledSuiteDecodeCase) {
  // v4-flash's b=64 decode row, scaled to sqrt(0.01) * 64 = 6 requests.
  BenchRun run =
      run_bench("--backend cpu --suite v4-flash --filter 'b=64 ' --scale 0.01 --iters 3", "decode");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  EXPECT_NE(run.cli.output.find("[1/1]"), std::string::npos) << run.cli.output;  // progress line
  const nlohmann::json& j = run.json;
  ASSERT_EQ(j["cases"].size(), 1u);
  const nlohmann::json& c = j["cases"][0];
  EXPECT_EQ(c["suite"], "v4-flash");
  EXPECT_EQ(c["shape_full"]["b"], 64);
  EXPECT_EQ(c["shape_run"]["b"], 6);
  EXPECT_DOUBLE_EQ(c["anchor"]["us"].get<double>(), 48.6);
  EXPECT_TRUE(c["anchor_time_over_ours"].is_null());  // only for full-size CUDA runs
  // b=6, s_q=2, h_q=64, main topk 128 + extra 512, d_qk 512 + d_v 512.
  const double queries = 6 * 2;
  EXPECT_DOUBLE_EQ(c["flop"].get<double>(), 2.0 * 64 * (queries * (128 + 512)) * (512 + 512));
  const double q_and_out = 2.0 * queries * 64 * 512 + 2.0 * queries * 64 * 512;
  const double retrieved = (c["bytes"].get<double>() - q_and_out) / 576;
  EXPECT_DOUBLE_EQ(retrieved, std::floor(retrieved));  // whole v4_fp8 rows of 576 bytes
  EXPECT_GT(retrieved, 0);
  EXPECT_LE(retrieved, queries * (128 + 512));
  EXPECT_TRUE(c["verify"]["ok"].get<bool>()) << c["verify"]["message"];
  // The reported time reuses the split schedule (the anchors' method); the CPU back end times
  // only that mode.
  EXPECT_EQ(j["decode_schedule"], "reuse");
  EXPECT_EQ(c["decode_schedule"], "reuse");
  EXPECT_DOUBLE_EQ(c["median_ms_schedule_reuse"].get<double>(), c["median_ms"].get<double>());
  EXPECT_TRUE(c["median_ms_schedule_build"].is_null());
}

TEST(Cli, BenchDecodeScheduleBuildIsReproducible) {
  BenchRun run = run_bench(
      "--backend cpu --suite v4-flash --filter 'b=2 ' --scale 0.01 --iters 3 "
      "--decode_schedule build --verify off",
      "decode_build");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  ASSERT_EQ(run.json["cases"].size(), 1u);
  const nlohmann::json& c = run.json["cases"][0];
  EXPECT_EQ(c["decode_schedule"], "build");
  EXPECT_DOUBLE_EQ(c["median_ms_schedule_build"].get<double>(), c["median_ms"].get<double>());
  EXPECT_NE(c["reproduce"].get<std::string>().find("--decode_schedule build"), std::string::npos);
  EXPECT_NE(run.cli.output.find("built in every timed call"), std::string::npos) << run.cli.output;
}

// Draft tokens sharing their request's indices (--shared_indices): named, recorded, verified, and
// fewer distinct rows to gather than with independent lists; refused where it means nothing.
TEST(Cli, BenchSharedIndicesNamesRecordsAndGathersFewerRows) {
  const std::string c =
      "--backend cpu --op decode --format v4_fp8 --b 4 --s_q 4 --h_q 4 "
      "--topk 256 --s_kv 4096 --iters 2 --warmup 0";
  BenchRun shared = run_bench(c + " --shared_indices 0.8", "shared");
  ASSERT_EQ(shared.cli.exit_code, 0) << shared.cli.output;
  BenchRun independent = run_bench(c, "independent");
  ASSERT_EQ(independent.cli.exit_code, 0) << independent.cli.output;
  const nlohmann::json& s = shared.json["cases"][0];
  const nlohmann::json& i = independent.json["cases"][0];
  EXPECT_EQ(s["name"], "decode v4_fp8 h_q=4 b=4 s_q=4 topk=256(p64) shared=0.80");
  EXPECT_DOUBLE_EQ(s["shape_full"]["shared_indices"].get<double>(), 0.8);
  EXPECT_FALSE(i["shape_full"].contains("shared_indices"));
  EXPECT_TRUE(s["verify"]["ok"].get<bool>()) << s.dump();
  // 3 of 4 tokens per request share ~80 % of token 0's rows: ~0.4x the distinct rows.
  EXPECT_LT(s["bytes"].get<double>(), 0.6 * i["bytes"].get<double>());
  EXPECT_NE(s["reproduce"].get<std::string>().find("--shared_indices 0.80"), std::string::npos);

  for (const std::string& bad :
       {std::string("bench --backend cpu --op decode --b 1 --s_q 1 --h_q 4 --topk 8 --s_kv 64 "
                    "--shared_indices 0.5"),
        std::string("bench --backend cpu --op prefill --d_qk 512 --s_q 2 --h_q 4 --topk 8 "
                    "--s_kv 64 --shared_indices 0.5"),
        std::string("bench --suite v41 --shared_indices 0.5"),
        std::string("bench --backend cpu --op decode --b 1 --s_q 2 --h_q 4 --topk 8 --s_kv 64 "
                    "--shared_indices 1.5")}) {
    CliRun r = run_cli(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("shared_indices"), std::string::npos) << r.output;
  }
}

// The draft-tokens suite: MTP rows whose draft tokens share 0, 50 or 90 % of their indices, each
// shared fraction its own case (name and flags), run on the CPU back end at a small scale.
TEST(Cli, BenchDraftTokensSuiteNamesTheSharedFraction) {
  CliRun list = run_cli("bench --suite draft-tokens --list_cases");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  for (const char* flags : {"--format v32_fp8 --b 64 --s_q 2 --h_q 32 --topk 2048",
                            "--shared_indices 0.50", "--shared_indices 0.90"}) {
    EXPECT_NE(list.output.find(flags), std::string::npos) << flags << "\n" << list.output;
  }
  BenchRun run = run_bench(
      "--backend cpu --suite draft-tokens --filter 'h_q=16 b=12 s_q=4 ' --scale 0.01 --iters 2",
      "draft");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  ASSERT_EQ(run.json["cases"].size(), 3u);
  EXPECT_EQ(run.json["cases"][0]["name"],
            "decode v4_fp8 h_q=16 b=12 s_q=4 topk=128(p256)+512(p64)");
  EXPECT_EQ(run.json["cases"][2]["name"],
            "decode v4_fp8 h_q=16 b=12 s_q=4 topk=128(p256)+512(p64) shared=0.90");
}

// The v41 suite: each V4.1 case (v41_fp8 main + v41_fp4 extra) beside the same problem stored as
// v4_fp8 records; bytes count each cache with its own record size.
TEST(Cli, BenchV41SuiteRunsEachCaseBesideItsV4Storage) {
  CliRun list = run_cli("bench --suite v41 --list_cases");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(
      list.output.find("--format v41_fp8 --b 256 --s_q 4 --h_q 16 --topk 128 "
                       "--page_block_size 256 --s_kv 16384 --extra_topk 512 "
                       "--extra_page_block_size 64 --extra_s_kv 16384 --extra_format v41_fp4"),
      std::string::npos)
      << list.output;
  EXPECT_NE(list.output.find("--format v4_fp8 --b 256 --s_q 4 --h_q 16 --topk 128"),
            std::string::npos)
      << list.output;
  BenchRun run = run_bench(
      "--backend cpu --suite v41 --filter 'h_q=16 b=12 s_q=4 ' --scale 0.01 --iters 2", "v41");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  const nlohmann::json& j = run.json;
  ASSERT_EQ(j["cases"].size(), 2u);
  const nlohmann::json& v41 = j["cases"][0];
  const nlohmann::json& v4 = j["cases"][1];
  EXPECT_EQ(v41["name"], "decode v41_fp8 h_q=16 b=12 s_q=4 topk=128(p256)+512(p64 v41_fp4)");
  EXPECT_EQ(v4["name"], "decode v4_fp8 h_q=16 b=12 s_q=4 topk=128(p256)+512(p64)");
  EXPECT_EQ(v41["shape_full"]["format"], "v41_fp8");
  EXPECT_EQ(v41["shape_full"]["kv_layout"], "page_split");
  EXPECT_EQ(v41["shape_full"]["extra_format"], "v41_fp4");
  EXPECT_EQ(v41["shape_full"]["extra_kv_layout"], "page_split");
  EXPECT_EQ(v4["shape_full"]["extra_format"], "v4_fp8");
  for (const nlohmann::json* c : {&v41, &v4}) {
    EXPECT_TRUE((*c)["verify"]["ok"].get<bool>()) << (*c)["verify"]["message"];
  }
  // Same data (same seed and shape): the same slots are read, 528 + 288 B against 576 + 576 B.
  const double queries = 2 * 4, q_and_out = 2.0 * queries * 16 * 512 * 2;
  const double v41_rows = v41["bytes"].get<double>() - q_and_out;
  const double v4_rows = v4["bytes"].get<double>() - q_and_out;
  EXPECT_GT(v41_rows, 0);
  EXPECT_LT(v41_rows, v4_rows);
  EXPECT_GT(v41_rows, v4_rows * 288.0 / 576.0);
  EXPECT_LT(v41_rows, v4_rows * 528.0 / 576.0);
  ASSERT_EQ(j["storage_ratios"].size(), 1u);
  const nlohmann::json& ratio = j["storage_ratios"][0];
  EXPECT_EQ(ratio["case"], v41["name"]);
  EXPECT_EQ(ratio["v4_fp8_case"], v4["name"]);
  EXPECT_DOUBLE_EQ(ratio["bytes_ratio"].get<double>(),
                   v4["bytes"].get<double>() / v41["bytes"].get<double>());
  EXPECT_DOUBLE_EQ(ratio["time_ratio"].get<double>(),
                   v4["median_ms"].get<double>() / v41["median_ms"].get<double>());
  EXPECT_NE(run.cli.output.find("storage: decode v41_fp8 h_q=16 b=12 s_q=4"), std::string::npos)
      << run.cli.output;
}

TEST(Cli, BenchCacheWriterReportsBytesAgainstTheFloor) {
  BenchRun run = run_bench(
      "--backend cpu --op write_kv_cache --format v41_fp4 --kv_layout token_interleaved --n 100 "
      "--page_block_size 64 --iters 2 --gemm_n 64",
      "writer");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  EXPECT_NE(run.cli.output.find("pass: cache bytes equal the host writer's"), std::string::npos)
      << run.cli.output;
  const nlohmann::json& j = run.json;
  EXPECT_EQ(j["op"], "write_kv_cache");
  EXPECT_EQ(j["shape"]["kv_layout"], "token_interleaved");
  EXPECT_EQ(j["shape"]["cache_slots"], 448);  // 4 * n rounded up to pages of 64
  EXPECT_DOUBLE_EQ(j["bytes"].get<double>(), 100.0 * (1024 + 4 + 288));
  EXPECT_EQ(j["times_ms"].size(), 2u);
  EXPECT_GT(j["bytes_floor_ms"].get<double>(), 0);
  EXPECT_TRUE(j["verify_ok"].get<bool>());
}

TEST(Cli, CacheFlagsNameTheFlagAndValue) {
  const std::string decode = "bench --op decode --b 1 --s_q 1 --s_kv 64 --h_q 2 --topk 4 ";
  struct Refusal {
    std::string args, text;
  };
  const Refusal refusals[] = {
      {decode + "--format v4_fp8 --kv_layout token_interleaved",
       "--kv_layout = token_interleaved is not a layout of --format v4_fp8 (it has page_split "
       "only)"},
      {decode + "--format v32_fp8 --kv_layout page_split",
       "--kv_layout = page_split is not a layout of --format v32_fp8"},
      {decode + "--format v41_fp8 --kv_layout interleaved",
       "--kv_layout = 'interleaved' is not one of: page_split, token_interleaved"},
      {decode + "--format v4_fp8 --extra_topk 4 --extra_format v41_fp4",
       "--extra_format = v41_fp4 cannot go with --format v4_fp8 (the extra cache has the main "
       "cache's format)"},
      {decode + "--format v41_fp4 --extra_topk 4 --extra_format v41_fp8",
       "--extra_format = v41_fp8 cannot go with --format v41_fp4"},
      {decode + "--format v41_fp8 --extra_format v41_fp4",
       "--extra_format needs --extra_topk (an extra cache)"},
      {decode + "--format v41_fp8 --extra_topk 4 --extra_format v41_fp4 --extra_kv_layout x",
       "--extra_kv_layout = 'x' is not one of"},
      {"bench --suite v41 --kv_layout page_split", "--kv_layout describes a single case: add --op"},
      {"bench --op write_kv_cache --format v41_fp8", "--op write_kv_cache needs --n"},
      {"bench --op write_kv_cache --n 8 --h_q 4", "--h_q is not a flag of --op write_kv_cache"},
      {"bench --op write_kv_cache --n 8 --format v4_fp8 --kv_layout token_interleaved",
       "--kv_layout = token_interleaved is not a layout of --format v4_fp8"},
      {"bench --op write_kv_cache --n 8 --s_kv 4", "--s_kv = 4 slots cannot hold --n = 8"},
      {"bench --suite v41 --n 8", "--n is the row count of --op write_kv_cache"},
      {"list --op decode --format v4_fp8 --kv_layout token_interleaved",
       "--kv_layout = token_interleaved is not a layout of --format v4_fp8"},
      {"list --op decode --format v4_fp8 --extra_topk 8 --extra_format v41_fp4",
       "--extra_format = v41_fp4 cannot go with --format v4_fp8"},
  };
  for (const Refusal& r : refusals) {
    CliRun run = run_cli(r.args);
    EXPECT_EQ(run.exit_code, 2) << r.args << "\n" << run.output;
    EXPECT_NE(run.output.find(r.text), std::string::npos) << r.args << "\n" << run.output;
  }
  CliRun ok = run_cli(
      "list --op decode --format v41_fp8 --kv_layout token_interleaved --extra_topk 8 "
      "--extra_format v41_fp4 --extra_kv_layout token_interleaved --h_q 16 --topk 128");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("decode v41_fp8 token_interleaved"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("extra_format=v41_fp4 extra_kv_layout=token_interleaved"),
            std::string::npos)
      << ok.output;
}

// ---- bad input refused up front (docs/rejected_input.md) ----------------------------------------

TEST(Cli, BenchRefusesCasesThatCannotFitWithTheBytesNeeded) {
  CliRun r = run_cli(
      "bench --op prefill --s_q 16777216 --h_q 128 --d_qk 576 --topk 1048576 --s_kv 64 "
      "--verify off");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" bytes) of host memory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("measuring the ceilings"), std::string::npos) << r.output;
}

// A bf16 cache decodes at d_qk 576 (the default) or 512: the case names, records and reproduces a
// d_qk of 512, and its bytes count 1 KiB rows.
TEST(Cli, BenchDecodesABf16CacheAtD_qk512) {
  BenchRun run = run_bench(
      "--backend cpu --op decode --format bf16 --d_qk 512 --b 2 --s_q 1 --h_q 4 --topk 64 "
      "--s_kv 256 --iters 2 --warmup 0",
      "bf16_d512");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  const nlohmann::json& c = run.json["cases"][0];
  EXPECT_EQ(c["name"], "decode bf16 d_qk=512 h_q=4 b=2 s_q=1 topk=64(p64)");
  EXPECT_EQ(c["shape_full"]["d_qk"], 512);
  EXPECT_TRUE(c["verify"]["ok"].get<bool>()) << c.dump();
  EXPECT_NE(c["reproduce"].get<std::string>().find("--d_qk 512"), std::string::npos) << c.dump();
  BenchRun d576 = run_bench(
      "--backend cpu --op decode --format bf16 --b 2 --s_q 1 --h_q 4 --topk 64 --s_kv 256 "
      "--iters 2 --warmup 0",
      "bf16_d576");
  ASSERT_EQ(d576.cli.exit_code, 0) << d576.cli.output;
  EXPECT_EQ(d576.json["cases"][0]["name"], "decode bf16 h_q=4 b=2 s_q=1 topk=64(p64)");
  EXPECT_EQ(d576.json["cases"][0]["shape_full"]["d_qk"], 576);
  CliRun bad =
      run_cli("bench --op decode --format bf16 --d_qk 544 --s_q 1 --s_kv 64 --h_q 16 --topk 8");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--d_qk = 544 does not match --format bf16, whose d_qk is 576 or 512"),
            std::string::npos)
      << bad.output;
}

TEST(Cli, BenchRefusesAD_qkTheDecodeFormatDoesNotHave) {
  CliRun r =
      run_cli("bench --op decode --format v4_fp8 --d_qk 576 --s_q 1 --s_kv 64 --h_q 16 --topk 8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--d_qk = 576 does not match --format v4_fp8, whose d_qk is 512"),
            std::string::npos)
      << r.output;
}

TEST(Cli, EmptyJsonPathsAreRefused) {
  for (const char* command :
       {"bench --op prefill --d_qk 512 --h_q 4 --topk 8 --s_q 2 --s_kv 64 --json ''",
        "bench --json=", "overhead --json ''"}) {
    CliRun r = run_cli(command);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find("--json needs a file name, got ''"), std::string::npos) << r.output;
  }
}

TEST(Cli, VersionAndHelpRefuseFlags) {
  CliRun version = run_cli("version");
  EXPECT_EQ(version.exit_code, 0) << version.output;
  for (const char* command : {"version --bogus", "help --bogus", "--version extra"}) {
    CliRun r = run_cli(command);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
    EXPECT_TRUE(r.output.find("--bogus") != std::string::npos ||
                r.output.find("'extra'") != std::string::npos)
        << r.output;
  }
}

TEST(Cli, ListRefusesProblemsPlanningRefuses) {
  CliRun r = run_cli("list --op decode --s_q 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the decode problem is invalid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("problem.s_q = 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" yes"), std::string::npos) << r.output;
  // An empty prefill (s_q = 0) is a valid call.
  CliRun prefill = run_cli("list --op prefill --s_q 0");
  EXPECT_EQ(prefill.exit_code, 0) << prefill.output;
}

TEST(Cli, KernelNamesAreCheckedBeforeAnyWork) {
  CliRun bench = run_cli("bench --op decode --s_q 1 --s_kv 64 --h_q 16 --topk 8 --kernel bogus");
  EXPECT_EQ(bench.exit_code, 2) << bench.output;
  EXPECT_NE(bench.output.find("--kernel = 'bogus' is not a kernel of back end"), std::string::npos)
      << bench.output;
  EXPECT_EQ(bench.output.find("measuring the ceilings"), std::string::npos) << bench.output;
  CliRun check = run_cli("check --cases 1 --kernel bogus");
  EXPECT_EQ(check.exit_code, 2) << check.output;
}

TEST(Cli, CheckRerunLineKeepsKernelAndThreads) {
  // A prefill kernel forced on decode cases: every case errors, and the rerun line must say how
  // the case was run.
  CliRun r = run_cli(
      "check --cases 1 --seed 4 --op decode --backend cpu --kernel "
      "cpu_sparse_prefill --threads 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rerun: sparse-mla check --cases 1 --seed 4 --backend cpu --op decode "
                          "--kernel cpu_sparse_prefill --threads 2"),
            std::string::npos)
      << r.output;
}

// ---- isolated-call timing and the host-overhead command
// -------------------------------------------

TEST(Cli, BenchIsolatedTimingReportsHostAndDeviceTimePerCall) {
  BenchRun run = run_bench(
      "--backend cpu --op decode --b 1 --s_q 1 --s_kv 128 --h_q 8 --topk 16 --format v32_fp8 "
      "--iters 5 --timing isolated",
      "isolated");
  ASSERT_EQ(run.cli.exit_code, 0) << run.cli.output;
  EXPECT_NE(run.cli.output.find("host/call"), std::string::npos) << run.cli.output;
  EXPECT_NE(run.cli.output.find("(wall)"), std::string::npos) << run.cli.output;
  EXPECT_EQ(run.json["timing"], "isolated");
  EXPECT_EQ(run.json["index_lists"].get<std::string>().rfind("flashmla:", 0), 0u);
  const nlohmann::json& c = run.json["cases"][0];
  const nlohmann::json& t = c["isolated"];
  ASSERT_EQ(t["host_ms"].size(), 5u);
  // CPU back end: the device time is the wall time, and the latency is that time.
  EXPECT_EQ(t["host_ms"], t["device_ms"]);
  EXPECT_DOUBLE_EQ(t["median_host_ms"].get<double>(), t["median_device_ms"].get<double>());
  EXPECT_DOUBLE_EQ(t["median_host_plus_device_ms"].get<double>(),
                   t["median_host_ms"].get<double>());
  EXPECT_DOUBLE_EQ(c["median_ms"].get<double>(), t["median_host_ms"].get<double>());
  EXPECT_GT(c["median_ms"].get<double>(), 0.0);
  EXPECT_NE(c["reproduce"].get<std::string>().find("--timing isolated"), std::string::npos);
  EXPECT_TRUE(c["verify"]["ok"].get<bool>()) << c["verify"]["message"];
}

TEST(Cli, OverheadTimesEveryCall) {
  const std::string path = temp_json("overhead");
  CliRun r = run_cli("overhead --calls 50 --batches 3 --json " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = read_json(path);
  std::filesystem::remove(path);
  ASSERT_EQ(j["rows"].size(), 10u);  // 7 empty-problem rows, 3 tiny ones
  for (const nlohmann::json& row : j["rows"]) {
    EXPECT_GT(row["host_us_fastest_batch"].get<double>(), 0.0) << row;
    EXPECT_LE(row["host_us_fastest_batch"].get<double>(),
              row["host_us_median_batch"].get<double>());
  }
}

}  // namespace
