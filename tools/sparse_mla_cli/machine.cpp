// Machine and source description for `info` and result files (machine.h). The commit comes from
// `git` run in the source tree the binary was built from (SMLA_SOURCE_DIR).
#include "machine.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "sparse_mla/version.h"

namespace sparse_mla::cli {

namespace {

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Runs a shell command and returns its stdout; *ok says whether it ran and exited with 0.
std::string command_output(const std::string& command, bool* ok) {
  *ok = false;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  std::array<char, 256> buf;
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) out += buf.data();
  *ok = pclose(pipe) == 0;
  return out;
}

std::string format_utc(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace

MachineInfo describe_machine() {
  MachineInfo m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      m.cpu_model = trim(line.substr(line.find(':') + 1));
      break;
    }
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  m.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  char host[256] = {};
  m.hostname = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  for (int i = 0; i < cuda_device_count(); ++i) {
    DeviceInfo info;
    if (get_device_info(i, &info).ok()) m.gpus.push_back(info);
  }
  return m;
}

SourceInfo describe_source() {
  SourceInfo s;
  s.library_version = version_string();
  // A copy of the tree (the GPU machine's) is told its commit by SMLA_COMMIT, which wins over
  // git: such a copy may carry git metadata of an older commit, and would then call itself that
  // commit, dirty (measured: a device copy of 8a2d055 reported d4b05b6).
  if (const char* given = std::getenv("SMLA_COMMIT"); given != nullptr && *given != '\0') {
    s.commit = given;
    return s;
  }
  const std::string git = "git -C '" SMLA_SOURCE_DIR "' ";
  bool ok = false;
  std::string commit = trim(command_output(git + "rev-parse HEAD 2>/dev/null", &ok));
  s.commit = ok && !commit.empty() ? commit : "unknown";
  if (ok) {
    std::string status =
        command_output(git + "status --porcelain --untracked-files=no 2>/dev/null", &ok);
    s.dirty = ok && !trim(status).empty();
  }
  return s;
}

std::string utc_date_time() { return format_utc("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_date() { return format_utc("%Y-%m-%d"); }

}  // namespace sparse_mla::cli
