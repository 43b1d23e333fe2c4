// Writes a command's --json result file, the one way every command does.
#pragma once

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

namespace sparse_mla::cli {

// Writes `j` (2-space indent) to `path`; false, after a message naming the command and the flag
// value, if the file cannot be written.
inline bool write_json_file(const char* command, const std::string& path,
                            const nlohmann::ordered_json& j) {
  std::ofstream file(path);
  file << j.dump(2) << "\n";
  if (!file) {
    std::cerr << "sparse-mla " << command << ": cannot write --json = '" << path << "'\n";
    return false;
  }
  return true;
}

}  // namespace sparse_mla::cli
