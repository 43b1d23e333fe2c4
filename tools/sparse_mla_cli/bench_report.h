// The terminal report of `sparse-mla bench`: one table row per case (time, rates, floors, share
// of the ceiling, FlashMLA anchor, verification), then the summaries (back-end rate against the
// GEMM ceiling, head-count ratios, errors).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench_types.h"
#include "sparse_mla/backend.h"

namespace sparse_mla::cli::bench {

// "s_q=41" / "b=1" when scaled, "full" otherwise.
std::string run_as(const CaseResult& r);
// "pass all 12 queries", "FAIL 3/40 queries", "off", "ERROR".
std::string verify_cell(const CaseResult& r);
// Anchor ratio (anchor time / our time; > 1 = faster than FlashMLA): only for a full-size case
// on CUDA, where the anchor was measured.
std::optional<double> anchor_ratio(const CaseResult& r, Backend backend);

// `timing`: with kIsolated the table has the host, device and host + device columns.
void print_table(const std::vector<CaseResult>& results, Backend backend, const Ceilings& ceil,
                 Timing timing);

// Cases of one problem at several head counts: the tp-shards goals as ratios.
struct HeadRatio {
  std::string group;
  int64_t h_q, base_h_q;
  bool decode;
  double ratio;  // decode: time / base time (goal <= 0.5 at h_q 16 vs 64);
                 // prefill: FLOP/s / base FLOP/s (goal >= 0.6 at h_q 16/32 vs 128)
};

std::vector<HeadRatio> head_ratios(const std::vector<CaseResult>& results);

// A V4.1 case (v41_fp8 main cache) and the same problem stored as v4_fp8 records, both run
// (the v41 suite's pairs): issue 24's goal is time_ratio >= bytes_ratio where V4 is memory-bound.
struct StorageRatio {
  std::string name, v4_name;
  double time_ratio;   // v4_fp8 median / V4.1 median
  double bytes_ratio;  // v4_fp8 bytes / V4.1 bytes
};

std::vector<StorageRatio> storage_ratios(const std::vector<CaseResult>& results);

void print_summaries(const std::vector<CaseResult>& results, Backend backend, const Ceilings& ceil,
                     const std::vector<HeadRatio>& ratios,
                     const std::vector<StorageRatio>& storage);

}  // namespace sparse_mla::cli::bench
