// `sparse-mla`: the project's command-line tool. Dispatches to a sub-command:
//   bench  benchmark suites with verification, floors and FlashMLA anchors (bench.cpp)
//   check  random SPEC §5 cases against the reference (check.cpp)
//   list   kernel variants and why each can or cannot run a problem (list.cpp)
//   info   the machine, its fp32 GEMM rate and CUDA devices (info.cpp)
//   overhead  the host time of one C++ API call (overhead.cpp)
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "gemm_ceiling.h"
#include "sparse_mla/version.h"

namespace {

constexpr const char* kUsage =
    "usage: sparse-mla <command> [flags]   (sparse-mla <command> --help for its flags)\n"
    "commands:\n"
    "  bench   run benchmark suites (default: DeepSeek V4 Flash + Pro), verified, with floors\n"
    "  check   run random test-recipe cases against the reference; non-zero exit on failure\n"
    "  list    list kernel variants and why each can or cannot run a given problem\n"
    "  info    print the machine, its measured fp32 GEMM rate and the CUDA devices\n"
    "  overhead  time the host cost of one C++ API call (validation, dispatch, back end)\n"
    "  version print the library version\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace sparse_mla::cli;
  Invocation inv;
  inv.argv.assign(argv, argv + argc);
  if (argc < 2) {
    std::cerr << kUsage;
    return kExitUsageError;
  }
  const std::string command = argv[1];
  inv.args.assign(argv + 2, argv + argc);
  // Only the commands that measure the GEMM ceiling may re-execute under a fixed OpenBLAS core.
  if (command == "bench" || command == "info") select_openblas_core(argv);
  if (command == "bench") return bench_command(inv);
  if (command == "check") return check_command(inv);
  if (command == "list") return list_command(inv);
  if (command == "info") return info_command(inv);
  if (command == "overhead") return overhead_command(inv);
  if (command == "version" || command == "--version" || command == "help" || command == "--help" ||
      command == "-h") {
    // No flags of their own: anything after them is a mistake, not something to ignore.
    FlagSet flags(command);
    if (sparse_mla::Status st = flags.parse(inv.args); !st.ok()) {
      std::cerr << "sparse-mla " << command << ": " << st.message() << "\n";
      return kExitUsageError;
    }
    if (command == "version" || command == "--version") {
      std::cout << "sparse-mla " << sparse_mla::version_string() << "\n";
    } else {
      std::cout << kUsage;
    }
    return kExitOk;
  }
  std::cerr << "sparse-mla: unknown command '" << command << "'\n" << kUsage;
  return kExitUsageError;
}
