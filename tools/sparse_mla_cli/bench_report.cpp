// The terminal report of `sparse-mla bench` (bench_report.h).
#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "table.h"

namespace sparse_mla::cli::bench {

std::string run_as(const CaseResult& r) {
  if (r.run.op == Operation::kSparsePrefill) {
    return r.run.prefill.s_q == r.full.prefill.s_q ? "full"
                                                   : "s_q=" + std::to_string(r.run.prefill.s_q);
  }
  return r.run.decode.b == r.full.decode.b ? "full" : "b=" + std::to_string(r.run.decode.b);
}

std::string verify_cell(const CaseResult& r) {
  if (!r.error.empty()) return "ERROR";
  if (!r.verified) return "off";
  const VerifyResult& v = r.verify;
  std::string what = v.checked == v.total
                         ? "all " + std::to_string(v.total)
                         : std::to_string(v.checked) + "/" + std::to_string(v.total);
  return std::string(v.ok ? "pass " : "FAIL ") + what + " queries";
}

std::optional<double> anchor_ratio(const CaseResult& r, Backend backend) {
  if (!r.full.anchor || backend != Backend::kCuda || run_as(r) != "full" || !r.error.empty()) {
    return std::nullopt;
  }
  return r.full.anchor->us / (r.median_ms * 1e3);
}

void print_table(const std::vector<CaseResult>& results, Backend backend, const Ceilings& ceil,
                 Timing timing) {
  const bool isolated = timing == Timing::kIsolated;
  std::vector<std::string> headers = {"case", "run as", "back end", "kernel", "runs", "median"};
  if (isolated) {
    for (const char* h : {"host/call", "device/call", "host+device"}) headers.push_back(h);
  }
  for (const char* h : {"FLOP/s", "bytes/s", "FLOP floor", "bytes floor", "% peak FLOP",
                        "% roofline", "anchor", "vs anchor", "verified"}) {
    headers.push_back(h);
  }
  Table t(headers);
  for (const CaseResult& r : results) {
    const double sec = r.median_ms * 1e-3;
    const double flop_floor = ceil.flop_per_s > 0 ? r.work.flop / ceil.flop_per_s : NAN;
    const double bytes_floor = ceil.bytes_per_s > 0 ? r.work.bytes / ceil.bytes_per_s : NAN;
    double roof = std::isnan(flop_floor) ? bytes_floor : std::max(flop_floor, bytes_floor);
    std::optional<double> ratio = anchor_ratio(r, backend);
    std::string anchor = r.full.anchor ? format_time_ms(r.full.anchor->us * 1e-3) : "-";
    std::vector<std::string> row = {r.full.name(), run_as(r), backend_name(backend), r.kernel};
    if (r.error.empty()) {
      row.push_back(std::to_string(r.ms.size()));
      row.push_back(format_time_ms(r.median_ms));
      if (isolated) {
        const IsolatedTimes& it = r.isolated_times;
        row.push_back(format_time_ms(it.median_host_ms));
        row.push_back(format_time_ms(it.median_device_ms) + (it.device_is_host ? " (wall)" : ""));
        row.push_back(format_time_ms(it.median_sum_ms()));
      }
      for (std::string cell :
           {format_rate(r.work.flop / sec, "FLOP/s"), format_rate(r.work.bytes / sec, "B/s"),
            format_time_ms(flop_floor * 1e3), format_time_ms(bytes_floor * 1e3),
            format_percent(r.work.flop / sec / ceil.flop_per_s), format_percent(roof / sec), anchor,
            ratio ? format_fixed(*ratio, 2) + "x" : "-", verify_cell(r)}) {
        row.push_back(std::move(cell));
      }
    } else {
      row.push_back("0");
      row.push_back("-");
      if (isolated) row.insert(row.end(), 3, "-");
      row.insert(row.end(), 6, "-");
      row.push_back(anchor);
      row.push_back("-");
      row.push_back(verify_cell(r));
    }
    t.add_row(std::move(row));
  }
  t.print(std::cout);
}

std::vector<HeadRatio> head_ratios(const std::vector<CaseResult>& results) {
  std::map<std::string, std::map<int64_t, const CaseResult*>> groups;
  for (const CaseResult& r : results) {
    if (r.error.empty() && r.full.suite == "tp-shards") {
      groups[r.full.head_group()][r.full.h_q()] = &r;
    }
  }
  std::vector<HeadRatio> out;
  for (const auto& [group, by_heads] : groups) {
    if (by_heads.size() < 2) continue;
    const bool decode = by_heads.begin()->second->full.op == Operation::kSparseDecode;
    const int64_t base = decode ? 64 : 128;
    auto it = by_heads.find(base);
    if (it == by_heads.end()) continue;
    const CaseResult& b = *it->second;
    for (const auto& [h, r] : by_heads) {
      if (h == base) continue;
      double ratio = decode ? r->median_ms / b.median_ms
                            : (r->work.flop / r->median_ms) / (b.work.flop / b.median_ms);
      out.push_back({group, h, base, decode, ratio});
    }
  }
  return out;
}

void print_summaries(const std::vector<CaseResult>& results, Backend backend, const Ceilings& ceil,
                     const std::vector<HeadRatio>& ratios) {
  std::cout << "\nceilings: " << format_rate(ceil.flop_per_s, "FLOP/s") << " (" << ceil.flop_source
            << "), " << format_rate(ceil.bytes_per_s, "B/s") << " (" << ceil.bytes_source << ")\n";
  if (backend != Backend::kCuda && ceil.flop_per_s > 0) {
    for (Operation op : {Operation::kSparsePrefill, Operation::kSparseDecode}) {
      double flop = 0, sec = 0;
      for (const CaseResult& r : results) {
        if (r.error.empty() && r.run.op == op) {
          flop += r.work.flop;
          sec += r.median_ms * 1e-3;
        }
      }
      if (sec == 0) continue;
      std::cout << backend_name(backend) << " back end, "
                << (op == Operation::kSparsePrefill ? "prefill" : "decode")
                << " (all cases, total FLOPs / total median time): "
                << format_rate(flop / sec, "FLOP/s") << " = "
                << format_percent(flop / sec / ceil.flop_per_s)
                << " of the fp32 GEMM rate (goal >= 30%)\n";
    }
  }
  for (const HeadRatio& h : ratios) {
    std::cout << "heads: " << h.group << ": h_q=" << h.h_q << " "
              << (h.decode ? "takes " : "reaches ") << format_fixed(h.ratio, 2)
              << "x the h_q=" << h.base_h_q << (h.decode ? " time" : " FLOP/s");
    if (h.decode && h.h_q == 16) std::cout << " (goal <= 0.5x)";
    if (!h.decode && (h.h_q == 16 || h.h_q == 32)) std::cout << " (goal >= 0.6x)";
    std::cout << "\n";
  }
  // V4.1 records against the same problem stored as v4_fp8 (the v41 suite's pairs): issue 24's
  // goal is a time ratio of at least the bytes ratio where the V4 path is memory-bound.
  for (const CaseResult& r : results) {
    if (!r.error.empty() || r.full.op != Operation::kSparseDecode ||
        r.full.decode.format != KvCacheFormat::kV41Fp8) {
      continue;
    }
    BenchCase v4 = r.full;
    v4.decode.format = KvCacheFormat::kV4Fp8;
    v4.decode.kv_layout = KvLayout::kDefault;
    v4.decode.extra_format.reset();
    v4.decode.extra_kv_layout = KvLayout::kDefault;
    for (const CaseResult& o : results) {
      if (o.error.empty() && o.full.name() == v4.name() && o.run.decode.b == r.run.decode.b) {
        std::cout << "storage: " << r.full.name() << ": as v4_fp8 records "
                  << format_fixed(o.median_ms / r.median_ms, 2) << "x the time, "
                  << format_fixed(o.work.bytes / r.work.bytes, 2)
                  << "x the bytes (goal: time ratio >= bytes ratio where memory-bound)\n";
        break;
      }
    }
  }
  bool subset = false;
  for (const CaseResult& r : results)
    subset = subset || (r.verified && r.verify.checked < r.verify.total);
  if (subset) {
    std::cout << "verified k/n queries: the reference ran on an evenly spaced subset (every i-th "
                 "prefill token; every i-th decode request, or one request's every j-th token), "
                 "sized to stay within --verify_gflop\n";
  }
  for (const CaseResult& r : results) {
    if (!r.error.empty()) std::cout << "error: " << r.full.name() << ": " << r.error << "\n";
    if (r.verified && !r.verify.ok) {
      std::cout << "verification failed: " << r.full.name() << ": " << r.verify.message << "\n";
    }
  }
}

}  // namespace sparse_mla::cli::bench
