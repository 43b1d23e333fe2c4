// The JSON record of a `sparse-mla bench` run (`--json FILE`): every number of every case with
// the command line that reproduces it, the commit, the machine and the ceilings.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_report.h"
#include "bench_types.h"
#include "machine.h"

namespace sparse_mla::cli::bench {

// What one run produced, for the record.
struct RunRecord {
  std::string command;    // as typed
  std::string reproduce;  // the flags that rerun the whole bench
  std::string suffix;     // the settings' flags, appended to each case's own flags
  const Settings* settings = nullptr;
  Backend backend = Backend::kCpu;
  MachineInfo machine;
  SourceInfo source;
  nlohmann::ordered_json ceilings_record;
  Ceilings ceilings;
  const std::vector<CaseResult>* results = nullptr;
  std::vector<HeadRatio> ratios;
  std::vector<StorageRatio> storage;
  double total_seconds = 0;
  bool all_ok = false;
};

nlohmann::ordered_json run_json(const RunRecord& run);

}  // namespace sparse_mla::cli::bench
