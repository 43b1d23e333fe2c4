// The sub-commands of `sparse-mla`. Each takes the whole command line (recorded in result files
// so that every number can be reproduced) and the arguments after the sub-command name, and
// returns the process exit code (flags.h: 0 ok, 1 failure, 2 bad flags).
#pragma once

#include <string>
#include <vector>

namespace sparse_mla::cli {

struct Invocation {
  std::vector<std::string> argv;  // as typed, argv[0] included
  std::vector<std::string> args;  // after the sub-command name
};

int bench_command(const Invocation& inv);
int check_command(const Invocation& inv);
int list_command(const Invocation& inv);
int info_command(const Invocation& inv);
int overhead_command(const Invocation& inv);

}  // namespace sparse_mla::cli
