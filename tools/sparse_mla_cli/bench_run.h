// One case of `sparse-mla bench`: make the test recipe's data, run it through the public API on
// the chosen back end, time it (--timing), and verify the outputs against the reference.
// Timing follows PERFORMANCE.md: median of >= 20 runs with L2 flushed on a GPU; decode time is
// schedule build + attention + combine, the plan made once outside the timed region.
#pragma once

#include <chrono>

#include "bench_types.h"
#include "sparse_mla/backend.h"

namespace sparse_mla::cli::bench {

// Makes, runs, times and verifies `r->run`; fills the rest of `r` (r->error on failure).
void run_case(const Settings& s, Device device, const RunOptions& options, CaseResult* r);

double seconds_since(std::chrono::steady_clock::time_point start);

}  // namespace sparse_mla::cli::bench
