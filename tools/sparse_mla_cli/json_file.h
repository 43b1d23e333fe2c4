// A command's --json result file, written the one way every command does: probed before the run,
// written after it.
#pragma once

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

namespace sparse_mla::cli {

// The message both checks give: the command and the flag value.
inline void report_unwritable_json(const char* command, const std::string& path) {
  std::cerr << "sparse-mla " << command << ": cannot write --json = '" << path << "'\n";
}

// Whether `path` can be written, asked before a run that can take minutes, so that a bad --json
// is refused up front (the caller exits 2) and not after the run. The probe appends nothing and
// removes the file if it made it; false after a message naming the command and the flag value.
inline bool json_file_writable(const char* command, const std::string& path) {
  const bool existed = std::filesystem::exists(path);
  if (!std::ofstream(path, std::ios::app)) {
    report_unwritable_json(command, path);
    return false;
  }
  if (!existed) std::filesystem::remove(path);
  return true;
}

// Writes `j` (2-space indent) to `path`; false, after a message naming the command and the flag
// value, if the file cannot be written.
inline bool write_json_file(const char* command, const std::string& path,
                            const nlohmann::ordered_json& j) {
  std::ofstream file(path);
  file << j.dump(2) << "\n";
  if (!file) {
    report_unwritable_json(command, path);
    return false;
  }
  return true;
}

}  // namespace sparse_mla::cli
