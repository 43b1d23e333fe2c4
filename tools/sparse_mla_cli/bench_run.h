// One case of `sparse-mla bench`: make the test recipe's data, run it through the public API on
// the chosen back end, time it (--timing), and verify the outputs against the reference.
// Timing follows docs/flashmla_baseline.md: median of >= 20 runs with L2 flushed on a GPU; decode
// time is schedule build + attention + combine, the plan made once outside the timed region.
#pragma once

#include <chrono>

#include "bench_types.h"
#include "sparse_mla/backend.h"

namespace sparse_mla::cli::bench {

// Makes, runs, times and verifies `r->run`; fills the rest of `r` (r->error on failure).
void run_case(const Settings& s, Device device, const RunOptions& options, CaseResult* r);

double seconds_since(std::chrono::steady_clock::time_point start);

// The memory a case needs, counted from its tensors (inputs, outputs, and the host copies that
// verification compares), in bytes, as doubles so that absurd sizes do not overflow.
struct CaseBytes {
  double host = 0;    // test data, outputs fetched back, the reference's outputs
  double device = 0;  // CUDA: inputs and outputs on the device (0 on the CPU)
};
// `seed`: the case's data seed, which sizes a decode case's caches (its requests' lengths).
CaseBytes case_bytes(const BenchCase& c, uint64_t seed, bool on_cuda);

// Refuses a case whose tensors cannot fit this machine (host memory, or the device's), naming
// the bytes needed: better than an allocation failure halfway through a run.
Status check_case_fits(const BenchCase& c, uint64_t seed, Device device);

}  // namespace sparse_mla::cli::bench
