// What a result was measured on and with: CPU model, thread count, host name, CUDA devices, the
// source commit and the date. `info` prints it; `bench --json` records it next to every number.
#pragma once

#include <string>
#include <vector>

#include "sparse_mla/runtime.h"

namespace sparse_mla::cli {

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int hardware_threads = 0;
  std::string hostname;
  std::vector<DeviceInfo> gpus;
};

MachineInfo describe_machine();

struct SourceInfo {
  std::string commit;  // full hash, "unknown" outside a git checkout
  bool dirty = false;  // uncommitted changes in the source tree
  std::string library_version;
};

SourceInfo describe_source();

std::string utc_date_time();  // "2026-12-01T10:22:03Z"
std::string utc_date();       // "2026-12-01"

}  // namespace sparse_mla::cli
