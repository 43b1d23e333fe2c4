// The JSON record of a `sparse-mla bench` run (bench_json.h).
#include "bench_json.h"

#include <cmath>

#include "flags.h"

namespace sparse_mla::cli::bench {

namespace {

using Json = nlohmann::ordered_json;

Json shape_json(const BenchCase& c) {
  Json j;
  if (c.op == Operation::kSparsePrefill) {
    const PrefillShape& p = c.prefill;
    j = {{"s_q", p.s_q},   {"s_kv", p.s_kv}, {"h_q", p.h_q},  {"h_kv", 1},
         {"d_qk", p.d_qk}, {"d_v", 512},     {"topk", p.topk}};
    return j;
  }
  const DecodeShape& d = c.decode;
  j = {{"b", d.b},
       {"s_q", d.s_q},
       {"h_q", d.h_q},
       {"h_kv", 1},
       {"d_qk", d.d_qk()},
       {"d_v", 512},
       {"topk", d.topk},
       {"format", kv_cache_format_name(d.format)},
       {"kv_layout", kv_layout_name(resolve_kv_layout(d.format, d.kv_layout))},
       {"page_block_size", d.page_block_size},
       {"s_kv", d.s_kv}};
  if (d.has_extra) {
    j["extra_format"] = kv_cache_format_name(d.extra());
    j["extra_kv_layout"] = kv_layout_name(resolve_kv_layout(d.extra(), d.extra_kv_layout));
    j["extra_topk"] = d.extra_topk;
    j["extra_page_block_size"] = d.extra_page_block_size;
    j["extra_s_kv"] = d.extra_s_kv;
  }
  if (d.shared_indices > 0) j["shared_indices"] = d.shared_indices;
  return j;
}

Json case_json(const CaseResult& r, Backend backend, const Ceilings& ceil,
               const std::string& reproduce_suffix, const std::string& decode_schedule) {
  Json j;
  j["suite"] = r.full.suite;
  j["name"] = r.full.name();
  j["op"] = r.full.op == Operation::kSparsePrefill ? "prefill" : "decode";
  j["shape_full"] = shape_json(r.full);
  j["shape_run"] = shape_json(r.run);
  j["reproduce"] = "sparse-mla bench " + shell_join(r.full.flags()) + reproduce_suffix;
  j["kernel"] = r.kernel;
  if (!r.plan_reason.empty()) j["plan_reason"] = r.plan_reason;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  const double sec = r.median_ms * 1e-3;
  j["warmup_runs"] = r.warmup;
  j["times_ms"] = r.ms;
  j["median_ms"] = r.median_ms;
  if (r.full.op == Operation::kSparseDecode) {
    j["decode_schedule"] = decode_schedule;  // which of the two median_ms is
    j["median_ms_schedule_reuse"] =
        std::isnan(r.median_reuse_ms) ? Json() : Json(r.median_reuse_ms);
    j["median_ms_schedule_build"] =
        std::isnan(r.median_build_ms) ? Json() : Json(r.median_build_ms);
  }
  if (r.isolated) {
    const IsolatedTimes& t = r.isolated_times;
    j["isolated"] = {
        {"host_ms", t.host_ms},
        {"device_ms", t.device_ms},
        {"median_host_ms", t.median_host_ms},
        {"median_device_ms", t.median_device_ms},
        {"median_host_plus_device_ms", t.median_sum_ms()},
        {"device_time", t.device_is_host
                            ? "CPU back end: the call does its work before it returns, so the "
                              "device time is the host wall time and median_ms is that time"
                            : "CUDA events around the call, launches held behind a host gate "
                              "until it returned; median_ms is the median of host + device"}};
  }
  j["flop"] = r.work.flop;
  j["bytes"] = r.work.bytes;
  j["flop_per_s"] = r.work.flop / sec;
  j["bytes_per_s"] = r.work.bytes / sec;
  j["flop_floor_ms"] = ceil.flop_per_s > 0 ? Json(r.work.flop / ceil.flop_per_s * 1e3) : Json();
  j["bytes_floor_ms"] = ceil.bytes_per_s > 0 ? Json(r.work.bytes / ceil.bytes_per_s * 1e3) : Json();
  j["fraction_of_peak_flop"] =
      ceil.flop_per_s > 0 ? Json(r.work.flop / sec / ceil.flop_per_s) : Json();
  if (r.full.anchor) {
    j["anchor"] = {
        {"us", r.full.anchor->us},
        {"tflop_per_s", r.full.anchor->tflops > 0 ? Json(r.full.anchor->tflops) : Json()},
        {"what", r.full.anchor->note + ", H200, docs/flashmla_baseline.md"}};
  }
  std::optional<double> ratio = anchor_ratio(r, backend);
  j["anchor_time_over_ours"] = ratio ? Json(*ratio) : Json();
  if (r.gemm_after > 0) j["gemm_flop_per_s_sampled_after"] = r.gemm_after;
  j["data_seconds"] = r.make_s;
  if (r.verified) {
    const VerifyResult& v = r.verify;
    j["verify"] = {{"ok", v.ok},
                   {"checked", v.checked},
                   {"total", v.total},
                   {"out_max_abs_err", v.out_max_abs_err},
                   {"out_cos_diff", v.out_cos_diff},
                   {"message", v.message},
                   {"seconds", r.verify_s}};
  } else {
    j["verify"] = nullptr;
  }
  return j;
}

Json gpu_json(const DeviceInfo& g) {
  return {{"index", g.index},
          {"name", g.name},
          {"sm_count", g.sm_count},
          {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
          {"memory_bytes", g.memory_bytes},
          {"l2_bytes", g.l2_bytes},
          {"max_sm_clock_mhz", g.max_sm_clock_mhz},
          {"memory_clock_mhz", g.memory_clock_mhz},
          {"memory_bus_bits", g.memory_bus_bits}};
}

}  // namespace

Json run_json(const RunRecord& run) {
  const Settings& s = *run.settings;
  Json j;
  j["tool"] = "sparse-mla bench";
  j["command"] = run.command;
  j["reproduce"] = run.reproduce;
  j["date"] = utc_date_time();
  j["git_commit"] = run.source.commit;
  j["git_dirty"] = run.source.dirty;
  j["library_version"] = run.source.library_version;
  j["backend"] = backend_name(run.backend);
  j["scale"] = s.scale;
  j["seed"] = s.seed;
  // How the cases' index lists were drawn (bench_run.cpp prefill_recipe / decode_recipe), so that
  // results from before FlashMLA's shape of lists are told apart from later ones.
  j["index_lists"] =
      "flashmla: distinct slots per prefill token; per decode request N(s_kv, s_kv/2) tokens on "
      "pages of its own, distinct positions per token";
  j["verify_mode"] = s.verify;
  j["verify_gflop"] = s.verify_gflop;
  j["decode_schedule"] = s.decode_schedule;
  j["timing"] = s.timing;
  j["machine"] = {{"cpu_model", run.machine.cpu_model},
                  {"hardware_threads", run.machine.hardware_threads},
                  {"hostname", run.machine.hostname}};
  Json gpus = Json::array();
  for (const DeviceInfo& g : run.machine.gpus) gpus.push_back(gpu_json(g));
  j["gpus"] = gpus;
  j["ceilings"] = run.ceilings_record;
  Json list = Json::array();
  for (const CaseResult& r : *run.results) {
    list.push_back(case_json(r, run.backend, run.ceilings, run.suffix, s.decode_schedule));
  }
  j["cases"] = list;
  Json heads = Json::array();
  for (const HeadRatio& h : run.ratios) {
    heads.push_back({{"group", h.group},
                     {"h_q", h.h_q},
                     {"base_h_q", h.base_h_q},
                     {"measure", h.decode ? "time / base time" : "FLOP/s / base FLOP/s"},
                     {"ratio", h.ratio}});
  }
  j["head_ratios"] = heads;
  Json storage = Json::array();
  for (const StorageRatio& r : run.storage) {
    storage.push_back({{"case", r.name},
                       {"v4_fp8_case", r.v4_name},
                       {"time_ratio", r.time_ratio},
                       {"bytes_ratio", r.bytes_ratio},
                       {"measure", "v4_fp8 / V4.1 (median time, bytes moved)"}});
  }
  j["storage_ratios"] = storage;
  j["total_seconds"] = run.total_seconds;
  j["all_ok"] = run.all_ok;
  return j;
}

}  // namespace sparse_mla::cli::bench
