// `sparse-mla overhead`: the host time one C++ API call costs, measured by timing many calls in a
// loop (std::chrono, no device work waited for). Two sizes per case:
//   empty  b = 0 (decode) / s_q = 0 (prefill): validation, the plan check and the kernel lookup,
//          everything src/core does per call, and no back-end work;
//   tiny   b = s_q = h_q = topk = 1: the same plus the back end's per-call cost (the CPU back
//          end's thread hand-off, the CUDA back end's launches) on a problem with almost no work.
// Decode runs with a plan made once and the schedule reused (DecodeSchedule::kReuse after one
// kBuild), as every layer after the first of a decode step calls it; planning is timed on its
// own. Each row gives the mean per-call time of the fastest of --batches batches (on a shared
// machine the others mostly measure the other jobs) and of the median batch.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "case_runner.h"
#include "commands.h"
#include "flags.h"
#include "json_file.h"
#include "machine.h"
#include "sparse_mla/sparse_mla.h"
#include "table.h"

namespace sparse_mla::cli {

namespace {

using Json = nlohmann::ordered_json;

// Owns the buffers of one call's tensors, zero-filled (valid indices, finite cache bytes).
class Tensors {
 public:
  explicit Tensors(Device device) : device_(device) {}
  Status make(DType dtype, std::initializer_list<int64_t> sizes, TensorView* view) {
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    void* data = nullptr;
    SMLA_RETURN_IF_ERROR(bytes(static_cast<size_t>(numel) * dtype_size(dtype), &data));
    *view = TensorView::contiguous(data, dtype, sizes, device_);
    return {};
  }
  Status cache(KvCacheFormat format, int d_qk, int64_t num_blocks, int64_t page_block_size,
               KvCacheView* view) {
    const int64_t stride = kv_cache_min_block_stride(format, page_block_size, d_qk);
    void* data = nullptr;
    SMLA_RETURN_IF_ERROR(bytes(static_cast<size_t>(stride * num_blocks), &data));
    *view = KvCacheView{data, format, num_blocks, page_block_size, stride, d_qk, device_};
    return {};
  }

 private:
  Status bytes(size_t n, void** data) {
    Buffer b;
    SMLA_RETURN_IF_ERROR(Buffer::allocate(device_, n, &b));
    SMLA_RETURN_IF_ERROR(fill_bytes(b.data(), device_, 0, std::max<size_t>(n, 1)));
    *data = b.data();
    buffers_.push_back(std::move(b));
    return {};
  }
  Device device_;
  std::vector<Buffer> buffers_;
};

struct DecodeCaseSpec {
  const char* name;
  KvCacheFormat format;
  int d_qk;
  int64_t h_q, topk, page_block_size;
  int64_t extra_topk, extra_page_block_size;  // 0 = no extra cache
};

constexpr DecodeCaseSpec kDecodeCases[] = {
    {"decode v32_fp8 h_q=128 topk=2048", KvCacheFormat::kV32Fp8, 576, 128, 2048, 64, 0, 0},
    {"decode v4_fp8 h_q=64 topk=128+512 (extra cache)", KvCacheFormat::kV4Fp8, 512, 64, 128, 256,
     512, 64},
};

struct PerCall {
  double best_us = 0, median_us = 0;
};

struct Row {
  std::string name, call, size;
  PerCall us;
};

// The mean per-call time (us) of `calls` calls: the fastest and the median of `batches` batches.
Status time_calls(const std::function<Status()>& fn, int64_t calls, int64_t batches, PerCall* us) {
  SMLA_RETURN_IF_ERROR(fn());  // first call outside: lazy initialisation is not per call
  std::vector<double> per_call;
  for (int64_t b = 0; b < batches; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < calls; ++i) SMLA_RETURN_IF_ERROR(fn());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    per_call.push_back(s * 1e6 / static_cast<double>(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  us->best_us = per_call.front();
  us->median_us = per_call[per_call.size() / 2];
  return {};
}

Status decode_rows(const DecodeCaseSpec& c, bool tiny, Device device, const RunOptions& options,
                   int64_t calls, int64_t batches, std::vector<Row>* rows) {
  const int64_t b = tiny ? 1 : 0, s_q = 1, h_q = tiny ? 1 : c.h_q;
  const int64_t topk = tiny ? 1 : c.topk, extra_topk = tiny ? 1 : c.extra_topk;
  Tensors t(device);
  SparseDecodeArgs a;
  SMLA_RETURN_IF_ERROR(t.make(DType::kBFloat16, {b, s_q, h_q, c.d_qk}, &a.q));
  SMLA_RETURN_IF_ERROR(t.cache(c.format, c.d_qk, 1, c.page_block_size, &a.kv_cache));
  SMLA_RETURN_IF_ERROR(t.make(DType::kInt32, {b, s_q, topk}, &a.indices));
  if (c.extra_topk > 0) {
    KvCacheView extra;
    SMLA_RETURN_IF_ERROR(t.cache(c.format, c.d_qk, 1, c.extra_page_block_size, &extra));
    a.extra_kv_cache = extra;
    TensorView extra_indices;
    SMLA_RETURN_IF_ERROR(t.make(DType::kInt32, {b, s_q, extra_topk}, &extra_indices));
    a.extra_indices = extra_indices;
  }
  SMLA_RETURN_IF_ERROR(t.make(DType::kBFloat16, {b, s_q, h_q, 512}, &a.out));
  SMLA_RETURN_IF_ERROR(t.make(DType::kFloat32, {b, s_q, h_q}, &a.lse));
  SparseDecodeProblem problem;
  SMLA_RETURN_IF_ERROR(describe_sparse_decode(a, &problem));
  DecodePlan plan;
  SMLA_RETURN_IF_ERROR(plan_sparse_decode(problem, &plan, options));
  Buffer workspace;
  SMLA_RETURN_IF_ERROR(Buffer::allocate(device, plan.workspace_bytes, &workspace));
  SMLA_RETURN_IF_ERROR(
      sparse_decode(a, plan, workspace.data(), workspace.bytes(), DecodeSchedule::kBuild, options));
  const std::string size = tiny ? "tiny" : "empty";
  Row r{c.name, "sparse_decode (plan reused, kReuse)", size};
  SMLA_RETURN_IF_ERROR(time_calls(
      [&] {
        return sparse_decode(a, plan, workspace.data(), workspace.bytes(), DecodeSchedule::kReuse,
                             options);
      },
      calls, batches, &r.us));
  rows->push_back(r);
  if (tiny) return {};
  Row d{c.name, "describe_sparse_decode", size};
  SMLA_RETURN_IF_ERROR(
      time_calls([&] { return describe_sparse_decode(a, &problem); }, calls, batches, &d.us));
  rows->push_back(d);
  Row p{c.name, "plan_sparse_decode (once per step)", size};
  DecodePlan scratch;
  SMLA_RETURN_IF_ERROR(time_calls([&] { return plan_sparse_decode(problem, &scratch, options); },
                                  calls, batches, &p.us));
  rows->push_back(p);
  return {};
}

Status prefill_rows(bool tiny, Device device, const RunOptions& options, int64_t calls,
                    int64_t batches, std::vector<Row>* rows) {
  const int64_t s_q = tiny ? 1 : 0, h_q = tiny ? 1 : 64, topk = tiny ? 1 : 512, s_kv = 64;
  Tensors t(device);
  SparsePrefillArgs a;
  SMLA_RETURN_IF_ERROR(t.make(DType::kBFloat16, {s_q, h_q, 512}, &a.q));
  SMLA_RETURN_IF_ERROR(t.make(DType::kBFloat16, {s_kv, 1, 512}, &a.kv));
  SMLA_RETURN_IF_ERROR(t.make(DType::kInt32, {s_q, 1, topk}, &a.indices));
  SMLA_RETURN_IF_ERROR(t.make(DType::kBFloat16, {s_q, h_q, 512}, &a.out));
  SMLA_RETURN_IF_ERROR(t.make(DType::kFloat32, {s_q, h_q}, &a.max_logits));
  SMLA_RETURN_IF_ERROR(t.make(DType::kFloat32, {s_q, h_q}, &a.lse));
  a.sm_scale = 0.0625f;
  Row r{"prefill d_qk=512 h_q=64 topk=512", "sparse_prefill", tiny ? "tiny" : "empty"};
  SMLA_RETURN_IF_ERROR(
      time_calls([&] { return sparse_prefill(a, options); }, calls, batches, &r.us));
  rows->push_back(r);
  return {};
}

}  // namespace

int overhead_command(const Invocation& inv) {
  int64_t calls = 10000, batches = 11, threads = 1;
  std::string backend_flag = "auto", json_path;
  bool no_tiny = false;
  FlagSet f("overhead");
  f.add_int("calls", &calls, "calls per batch", 1, 100000000);
  f.add_int("batches", &batches, "batches; the fastest and the median batch are reported", 1, 1000);
  f.add_string("backend", &backend_flag, "back end",
               {std::begin(kBackendChoices), std::end(kBackendChoices)});
  f.add_int("threads", &threads, "CPU back end threads for the tiny calls; 0 = all", 0, 4096);
  f.add_switch("no_tiny", &no_tiny, "time only the empty calls (src/core alone)");
  f.add_path("json", &json_path, "write the numbers to this JSON file");
  if (Status st = f.parse(inv.args); !st.ok()) {
    std::cerr << "sparse-mla overhead: " << st.message() << "\n";
    return kExitUsageError;
  }
  if (f.help_requested()) {
    std::cout << "usage: sparse-mla overhead [flags]\n"
              << "Times the host cost of one C++ API call (validation, plan check, dispatch; "
                 "then with the back end's per-call work on a tiny problem).\n\n"
              << f.usage();
    return kExitOk;
  }
  if (!json_path.empty() && !json_file_writable("overhead", json_path)) return kExitUsageError;
  const Backend backend = resolve_backend(*parse_backend(backend_flag));
  if (backend == Backend::kCuda && !cuda_available()) {
    std::cerr << "sparse-mla overhead: --backend = cuda but no CUDA device is available to this "
                 "build\n";
    return kExitFailure;
  }
  const Device device = device_for(backend);
  RunOptions options;
  options.backend = backend;
  options.num_threads = static_cast<int>(threads);

  std::vector<Row> rows;
  for (bool tiny : {false, true}) {
    if (tiny && no_tiny) continue;
    Status st = prefill_rows(tiny, device, options, calls, batches, &rows);
    for (const DecodeCaseSpec& c : kDecodeCases) {
      if (st.ok()) st = decode_rows(c, tiny, device, options, calls, batches, &rows);
    }
    if (!st.ok()) {
      std::cerr << "sparse-mla overhead: " << st.message() << "\n";
      return kExitFailure;
    }
  }
  const SourceInfo source = describe_source();
  const MachineInfo machine = describe_machine();
  std::cout << "sparse-mla overhead: host time per call on " << backend_name(backend) << " ("
            << machine.cpu_model << "), commit " << source.commit.substr(0, 12)
            << (source.dirty ? "+dirty" : "") << ", " << batches << " batches of " << calls
            << " calls\n";
  Table t({"case", "call", "size", "host us/call (fastest batch)", "(median batch)"});
  for (const Row& r : rows) {
    t.add_row(
        {r.name, r.call, r.size, format_fixed(r.us.best_us, 3), format_fixed(r.us.median_us, 3)});
  }
  t.print(std::cout);
  if (!json_path.empty()) {
    Json j;
    j["tool"] = "sparse-mla overhead";
    j["command"] = shell_join(inv.argv);
    j["date"] = utc_date_time();
    j["git_commit"] = source.commit;
    j["git_dirty"] = source.dirty;
    j["backend"] = backend_name(backend);
    j["cpu_model"] = machine.cpu_model;
    j["calls_per_batch"] = calls;
    j["batches"] = batches;
    Json list = Json::array();
    for (const Row& r : rows) {
      list.push_back({{"case", r.name},
                      {"call", r.call},
                      {"size", r.size},
                      {"host_us_fastest_batch", r.us.best_us},
                      {"host_us_median_batch", r.us.median_us}});
    }
    j["rows"] = list;
    if (!write_json_file("overhead", json_path, j)) return kExitFailure;
  }
  return kExitOk;
}

}  // namespace sparse_mla::cli
