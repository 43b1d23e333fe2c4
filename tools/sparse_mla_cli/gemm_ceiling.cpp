// Measures the host ceilings of gemm_ceiling.h: OpenBLAS sgemm on random data and a threaded
// memcpy, each best of a few runs (the best run is the ceiling; noise only slows runs down).
#include "gemm_ceiling.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sparse_mla/runtime.h"

#if defined(SMLA_HAVE_CBLAS)
#include <cblas.h>
#endif

namespace sparse_mla::cli {

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

void select_openblas_core(char** argv) {
#if defined(SMLA_HAVE_CBLAS) && defined(OPENBLAS_VERSION) && defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* wanted = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    wanted = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    wanted = "Haswell";
  }
  if (wanted == nullptr) return;
  std::string core = openblas_get_corename();
  for (char& ch : core) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // OpenBLAS x86-64 cores with AVX2 or better kernels.
  for (const char* good : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"}) {
    if (core == good) return;
  }
  setenv("OPENBLAS_CORETYPE", wanted, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: keep going with the detected core
#else
  (void)argv;
#endif
}

std::optional<GemmCeiling> measure_fp32_gemm(int n, int repeats) {
#if defined(SMLA_HAVE_CBLAS)
  const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(elems), b(elems), c(elems);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < elems; ++i) {
    a[i] = dist(rng);
    b[i] = dist(rng);
  }
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  run();  // warm-up: thread pool start, page faults of c
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, seconds_since(start));
  }
  GemmCeiling g;
  g.n = n;
  g.repeats = repeats;
  g.flop_per_s = 2.0 * n * static_cast<double>(n) * n / best;
#if defined(OPENBLAS_VERSION)
  g.library = std::string(openblas_get_config()) + ", " +
              std::to_string(openblas_get_num_threads()) + " threads";
#else
  g.library = "CBLAS";
#endif
  return g;
#else
  (void)n;
  (void)repeats;
  return std::nullopt;
#endif
}

CopyBandwidth measure_host_copy(size_t buffer_bytes, int repeats) {
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<unsigned char> src(buffer_bytes), dst(buffer_bytes);
  std::mt19937 rng(11);
  for (size_t i = 0; i < buffer_bytes; i += 4096) src[i] = static_cast<unsigned char>(rng());
  const size_t chunk = (buffer_bytes + threads - 1) / threads;
  auto run = [&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      size_t begin = std::min(buffer_bytes, chunk * t);
      size_t end = std::min(buffer_bytes, begin + chunk);
      pool.emplace_back([&, begin, end] { std::memcpy(&dst[begin], &src[begin], end - begin); });
    }
    for (std::thread& th : pool) th.join();
  };
  run();  // warm-up: page faults of dst
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, seconds_since(start));
  }
  CopyBandwidth c;
  c.buffer_bytes = buffer_bytes;
  c.threads = threads;
  c.repeats = repeats;
  c.bytes_per_s = 2.0 * static_cast<double>(buffer_bytes) / best;
  return c;
}

std::optional<CopyBandwidth> measure_device_copy(Device device, size_t buffer_bytes, int repeats) {
  Buffer src, dst;
  if (!Buffer::allocate(device, buffer_bytes, &src).ok() ||
      !Buffer::allocate(device, buffer_bytes, &dst).ok() ||
      !fill_bytes(src.data(), device, 0x3c, buffer_bytes).ok()) {
    return std::nullopt;
  }
  std::vector<double> ms;
  auto copy = [&] { return copy_bytes(dst.data(), device, src.data(), device, buffer_bytes); };
  if (!time_runs(device, nullptr, copy, 1, repeats, false, &ms).ok() || ms.empty()) {
    return std::nullopt;
  }
  CopyBandwidth c;
  c.buffer_bytes = buffer_bytes;
  c.repeats = repeats;
  c.bytes_per_s =
      2.0 * static_cast<double>(buffer_bytes) / (*std::min_element(ms.begin(), ms.end()) * 1e-3);
  return c;
}

}  // namespace sparse_mla::cli
