// Command-line flags of the `sparse-mla` sub-commands: each command declares its flags (name,
// target variable, help, allowed range or choices), then parses argv. Accepted spellings are
// `--name value` and `--name=value`; switches take no value. Every error names the flag and the
// offending value, and the command exits with kUsageError.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sparse_mla/status.h"

namespace sparse_mla::cli {

// Process exit codes of every sub-command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;     // a check or verification failed, or a run errored
inline constexpr int kExitUsageError = 2;  // bad flags

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  void add_int(const std::string& name, int64_t* value, std::string help, int64_t min, int64_t max);
  void add_double(const std::string& name, double* value, std::string help, double min, double max);
  void add_string(const std::string& name, std::string* value, std::string help,
                  std::vector<std::string> choices = {});
  // A file name: like add_string, but an empty value is an error (it would be ignored).
  void add_path(const std::string& name, std::string* value, std::string help);
  void add_switch(const std::string& name, bool* value, std::string help);
  // What usage() shows as the default ("" = nothing), for flags whose default depends on others.
  void set_default_text(const std::string& name, std::string text);

  // Parses args (argv without the program and sub-command names). `--help` sets help_requested().
  Status parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  // True when the flag appeared on the command line (rather than keeping its default).
  bool was_set(const std::string& name) const { return set_.count(name) != 0; }
  std::string usage() const;

 private:
  struct Flag {
    std::string help;
    std::string default_text;
    bool is_switch = false;
    std::function<Status(const std::string& value)> assign;
  };
  void add(const std::string& name, Flag flag);

  std::string command_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::set<std::string> set_;
  bool help_requested_ = false;
};

// Parses a whole string as a number; nullopt when it is not one (or has trailing characters).
std::optional<int64_t> parse_int(const std::string& text);
std::optional<double> parse_double(const std::string& text);

// Joins argv into one line a shell would read back (single quotes where needed).
std::string shell_join(const std::vector<std::string>& words);

}  // namespace sparse_mla::cli
