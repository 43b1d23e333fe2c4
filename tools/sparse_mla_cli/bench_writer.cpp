// The cache-writer benchmark (bench_writer.h).
#include "bench_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "bench_ceilings.h"
#include "bench_run.h"
#include "case_runner.h"
#include "json_file.h"
#include "machine.h"
#include "sparse_mla/sparse_mla.h"
#include "table.h"

namespace sparse_mla::cli::bench {

namespace {

constexpr int kGpuRuns = 20;
constexpr int kCpuMinRuns = 3;
constexpr int kCpuMaxRuns = 50;

// The host data of one writer case: rows, slots and the cache bytes before the writes.
struct WriterData {
  std::vector<uint16_t> rows;  // [n, d_qk] bf16
  std::vector<int32_t> slots;  // [n], distinct, random
  std::vector<uint8_t> cache;  // num_blocks * stride, quantized zeros (padding zero)
  KvCacheView view;
};

Status make_writer_data(const Settings& s, KvCacheFormat format, KvLayout layout, int d_qk,
                        int64_t cache_slots, WriterData* w) {
  const int64_t n = s.n, page = s.page_block_size;
  const int64_t blocks = (cache_slots + page - 1) / page;
  const int64_t stride = kv_cache_min_block_stride(format, page, d_qk, layout);
  w->view = KvCacheView{nullptr, format, blocks, page, stride, d_qk, Device::cpu(), layout};
  w->cache.assign(blocks * stride, 0);
  w->view.data = w->cache.data();
  std::mt19937_64 rng(static_cast<uint64_t>(s.seed));
  std::normal_distribution<float> normal;
  w->rows.resize(n * d_qk);
  for (uint16_t& v : w->rows) v = float_to_bf16(normal(rng) / 10);
  std::vector<int32_t> all(blocks * page);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  w->slots.assign(all.begin(), all.begin() + n);
  return {};
}

}  // namespace

int writer_bench(const Settings& s, const FlagSet& f, const std::vector<std::string>& argv) {
  auto usage_error = [](const std::string& message) {
    std::cerr << "sparse-mla bench: " << message << "\n";
    return kExitUsageError;
  };
  if (!f.was_set("n")) return usage_error("--op write_kv_cache needs --n (rows per call)");
  for (const char* decode_only :
       {"b", "s_q", "h_q", "topk", "extra_topk", "extra_page_block_size", "extra_s_kv",
        "extra_format", "extra_kv_layout", "shared_indices"}) {
    if (f.was_set(decode_only)) {
      return usage_error("--" + std::string(decode_only) +
                         " is not a flag of --op write_kv_cache (--n, --format, --kv_layout, "
                         "--page_block_size, --s_kv)");
    }
  }
  ResolvedCaches caches;
  if (Status st = resolve(s.caches, f, false, &caches); !st.ok()) return usage_error(st.message());
  const KvCacheFormat format = caches.format;
  const KvLayout layout = resolve_kv_layout(format, caches.kv_layout);
  const int format_d_qk =
      kv_cache_format_info(format).d_qk != 0 ? kv_cache_format_info(format).d_qk : 576;
  const int d_qk = f.was_set("d_qk") ? static_cast<int>(s.d_qk) : format_d_qk;
  if (d_qk != format_d_qk && !(format == KvCacheFormat::kBf16 && (d_qk == 512 || d_qk == 576))) {
    return usage_error("--d_qk = " + std::to_string(d_qk) + " does not match --format " +
                       s.caches.format + ", whose d_qk is " + std::to_string(format_d_qk));
  }
  const int64_t cache_slots = f.was_set("s_kv") ? s.s_kv : 4 * s.n;
  if (cache_slots < s.n) {
    return usage_error("--s_kv = " + std::to_string(cache_slots) +
                       " slots cannot hold --n = " + std::to_string(s.n) + " distinct rows");
  }
  if (cache_slots > INT32_MAX) {
    return usage_error("--s_kv = " + std::to_string(cache_slots) +
                       " slots do not fit int32 slot numbers");
  }
  if (!s.json_path.empty() && !json_file_writable("bench", s.json_path)) return kExitUsageError;
  const Backend backend = resolve_backend(*parse_backend(s.backend));
  if (backend == Backend::kCuda && !cuda_available()) {
    std::cerr << "sparse-mla bench: --backend = cuda but no CUDA device is available to this "
                 "build\n";
    return kExitFailure;
  }
  const Device device = device_for(backend);

  WriterData w;
  if (Status st = make_writer_data(s, format, layout, d_qk, cache_slots, &w); !st.ok()) {
    return usage_error(st.message());
  }
  // Zero padding, as an engine's allocated cache has after its first quantize.
  std::vector<uint16_t> zeros(static_cast<size_t>(w.view.num_slots()) * d_qk, 0);
  if (Status st = quantize_kv_cache(
          TensorView::contiguous(zeros.data(), DType::kBFloat16,
                                 {w.view.num_blocks, w.view.page_block_size, 1, d_qk}),
          w.view);
      !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitFailure;
  }
  zeros = {};
  // The expected bytes: the host writer on a copy.
  std::vector<uint8_t> expected = w.cache;
  KvCacheView expected_view = w.view;
  expected_view.data = expected.data();
  const int64_t n = s.n;
  const TensorView host_rows = TensorView::contiguous(w.rows.data(), DType::kBFloat16, {n, d_qk});
  const TensorView host_slots = TensorView::contiguous(w.slots.data(), DType::kInt32, {n});
  if (Status st = write_kv_cache(host_rows, host_slots, expected_view); !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitFailure;
  }

  // The call's tensors where the back end runs.
  Buffer rows_buf, slots_buf, cache_buf;
  TensorView rows = host_rows, slots = host_slots;
  KvCacheView cache = w.view;
  if (device.is_cuda()) {
    auto upload = [&](const void* src, size_t bytes, Buffer* buf) -> Status {
      SMLA_RETURN_IF_ERROR(Buffer::allocate(device, bytes, buf));
      return copy_bytes(buf->data(), device, src, Device::cpu(), bytes);
    };
    Status st = upload(w.rows.data(), w.rows.size() * 2, &rows_buf);
    if (st.ok()) st = upload(w.slots.data(), w.slots.size() * 4, &slots_buf);
    if (st.ok()) st = upload(w.cache.data(), w.cache.size(), &cache_buf);
    if (!st.ok()) {
      std::cerr << "sparse-mla bench: " << st.message() << "\n";
      return kExitFailure;
    }
    rows.data = rows_buf.data();
    rows.device = device;
    slots.data = slots_buf.data();
    slots.device = device;
    cache.data = cache_buf.data();
    cache.device = device;
  }
  RunOptions options;
  options.backend = backend;
  options.num_threads = static_cast<int>(s.threads);
  auto call = [&] { return write_kv_cache(rows, slots, cache, options); };

  std::cerr << "measuring the ceilings ...\n";
  HostCeilings host_ceilings(s.gemm_n);
  nlohmann::ordered_json ceil_record;
  Ceilings ceil;
  if (device.is_cuda()) {
    ceil = gpu_ceilings(device, &ceil_record);
  } else {
    host_ceilings.sample(true);
  }
  const int warmup = s.warmup >= 0 ? static_cast<int>(s.warmup) : (device.is_cuda() ? 3 : 1);
  std::vector<double> first, ms;
  if (Status st = time_runs(device, nullptr, call, 0, std::max(warmup, 1), false, &first);
      !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitFailure;
  }
  int runs = static_cast<int>(s.iters);
  if (runs == 0) {
    runs = device.is_cuda()
               ? kGpuRuns
               : std::clamp(static_cast<int>(s.time_budget * 1e3 / std::max(first.back(), 1e-6)),
                            kCpuMinRuns, kCpuMaxRuns);
  }
  if (Status st = time_runs(device, nullptr, call, 0, runs, device.is_cuda(), &ms); !st.ok()) {
    std::cerr << "sparse-mla bench: " << st.message() << "\n";
    return kExitFailure;
  }
  if (!device.is_cuda()) {
    host_ceilings.sample(false);
    ceil = host_ceilings.ceilings();
    ceil_record = host_ceilings.record();
  }

  // The cache after the runs: every run writes the same bytes.
  bool verified = true;
  std::string verify_text = "off";
  if (s.verify != "off") {
    std::vector<uint8_t> got = w.cache;
    if (device.is_cuda()) {
      if (Status st = copy_bytes(got.data(), Device::cpu(), cache_buf.data(), device, got.size());
          !st.ok()) {
        std::cerr << "sparse-mla bench: " << st.message() << "\n";
        return kExitFailure;
      }
    }
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != expected[i];
    verified = differ == 0;
    verify_text = verified ? "pass: cache bytes equal the host writer's"
                           : "FAIL: " + std::to_string(differ) + " cache bytes differ from the " +
                                 "host writer's";
  }

  const WorkCount work = write_kv_cache_work(n, d_qk, format);
  const double med = median(ms);
  const double floor_ms = ceil.bytes_per_s > 0 ? work.bytes / ceil.bytes_per_s * 1e3 : NAN;
  const std::string name = "write_kv_cache " + std::string(kv_cache_format_name(format)) + " " +
                           kv_layout_name(layout) + " n=" + std::to_string(n) + " (p" +
                           std::to_string(s.page_block_size) + ", " +
                           std::to_string(w.view.num_slots()) + " slots)";
  const SourceInfo source = describe_source();
  std::cout << "sparse-mla bench: cache writer on " << backend_name(backend) << ", commit "
            << source.commit.substr(0, 12) << (source.dirty ? "+dirty" : "") << "\n\n";
  Table t({"case", "back end", "runs", "median", "bytes", "bytes/s", "bytes floor", "% roofline",
           "verified"});
  t.add_row({name, backend_name(backend), std::to_string(ms.size()), format_time_ms(med),
             format_rate(work.bytes, "B"), format_rate(work.bytes / (med * 1e-3), "B/s"),
             std::isnan(floor_ms) ? "-" : format_time_ms(floor_ms),
             std::isnan(floor_ms) ? "-" : format_percent(floor_ms / med), verify_text});
  t.print(std::cout);
  std::cout << "bytes = n * (2 * d_qk read + 4 slot + " << kv_cache_bytes_per_token(format, d_qk)
            << " record written); bytes floor = bytes / " << format_rate(ceil.bytes_per_s, "B/s")
            << " (" << ceil.bytes_source << ")\n";

  if (!s.json_path.empty()) {
    nlohmann::ordered_json j;
    j["command"] = shell_join(argv);
    j["op"] = "write_kv_cache";
    j["name"] = name;
    j["backend"] = backend_name(backend);
    j["commit"] = source.commit;
    j["dirty"] = source.dirty;
    j["date"] = utc_date_time();
    j["shape"] = {{"n", n},
                  {"d_qk", d_qk},
                  {"format", kv_cache_format_name(format)},
                  {"kv_layout", kv_layout_name(layout)},
                  {"page_block_size", s.page_block_size},
                  {"cache_slots", w.view.num_slots()}};
    j["times_ms"] = ms;
    j["median_ms"] = med;
    j["bytes"] = work.bytes;
    j["bytes_per_s"] = work.bytes / (med * 1e-3);
    j["ceilings"] = ceil_record;
    j["bytes_floor_ms"] =
        std::isnan(floor_ms) ? nlohmann::ordered_json() : nlohmann::ordered_json(floor_ms);
    j["verified"] = s.verify != "off";
    j["verify_ok"] = verified;
    if (!write_json_file("bench", s.json_path, j)) return kExitFailure;
    std::cerr << "wrote " << s.json_path << "\n";
  }
  return verified ? kExitOk : kExitFailure;
}

}  // namespace sparse_mla::cli::bench
