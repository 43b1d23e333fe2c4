// Isolated-call timing (isolated_timing.h). The CUDA part uses the CUDA runtime directly (the
// library links it publicly in a CUDA build) and is compiled only when SMLA_WITH_CUDA is set.
#include "isolated_timing.h"

#include <atomic>
#include <chrono>
#include <string>

#if defined(SMLA_WITH_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <thread>
#endif

namespace sparse_mla::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Status time_host_calls(const std::function<Status()>& fn, int warmup, int iterations,
                       std::vector<double>* host_ms, std::vector<double>* device_ms) {
  for (int i = 0; i < warmup; ++i) SMLA_RETURN_IF_ERROR(fn());
  for (int i = 0; i < iterations; ++i) {
    const Clock::time_point start = Clock::now();
    SMLA_RETURN_IF_ERROR(fn());
    const double ms = ms_between(start, Clock::now());
    host_ms->push_back(ms);
    device_ms->push_back(ms);
  }
  return {};
}

#if defined(SMLA_WITH_CUDA)

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return {StatusCode::kDeviceError,
          std::string("isolated timing: ") + what + ": " + cudaGetErrorString(e)};
}

#define SMLA_CLI_CUDA(expr) SMLA_RETURN_IF_ERROR(cuda_status((expr), #expr))

// The gate a stream waits on: a host function that spins until the host opens it. A call that
// synchronises the device would wait on the gate forever, so the gate opens itself after
// kGateTimeout and says so.
constexpr auto kGateTimeout = std::chrono::milliseconds(500);

struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
};

void CUDART_CB wait_at_gate(void* data) {
  auto* gate = static_cast<Gate*>(data);
  const Clock::time_point until = Clock::now() + kGateTimeout;
  while (!gate->open.load(std::memory_order_acquire)) {
    if (Clock::now() > until) {
      gate->timed_out.store(true);
      return;
    }
    std::this_thread::yield();
  }
}

class CudaResources {
 public:
  ~CudaResources() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (flush_) cudaFree(flush_);
  }
  Status create(int device, bool flush_l2) {
    SMLA_CLI_CUDA(cudaSetDevice(device));
    SMLA_CLI_CUDA(cudaEventCreate(&start_));
    SMLA_CLI_CUDA(cudaEventCreate(&stop_));
    if (flush_l2) {
      int l2_bytes = 0;
      SMLA_CLI_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
      // 2x the L2 (docs/flashmla_baseline.md), at least 64 MiB, as the queued timing flushes.
      flush_bytes_ = std::max<size_t>(2 * static_cast<size_t>(l2_bytes), size_t{64} << 20);
      SMLA_CLI_CUDA(cudaMalloc(&flush_, flush_bytes_));
    }
    return {};
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }
  void* flush() const { return flush_; }
  size_t flush_bytes() const { return flush_bytes_; }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
};

Status time_cuda_calls(int device, const std::function<Status()>& fn, int warmup, int iterations,
                       bool flush_l2, std::vector<double>* host_ms,
                       std::vector<double>* device_ms) {
  CudaResources res;
  SMLA_RETURN_IF_ERROR(res.create(device, flush_l2));
  cudaStream_t stream = nullptr;  // the stream the CLI's calls use (RunOptions::stream default)
  for (int i = 0; i < warmup; ++i) SMLA_RETURN_IF_ERROR(fn());
  SMLA_CLI_CUDA(cudaDeviceSynchronize());
  // Host pass: the device idle before each call.
  for (int i = 0; i < iterations; ++i) {
    const Clock::time_point start = Clock::now();
    SMLA_RETURN_IF_ERROR(fn());
    host_ms->push_back(ms_between(start, Clock::now()));
    SMLA_CLI_CUDA(cudaDeviceSynchronize());
  }
  // Device pass: gate, L2 fill, start event, the call's launches, stop event; open the gate
  // once the call has returned.
  for (int i = 0; i < iterations; ++i) {
    Gate gate;
    // On every way out of this iteration the gate opens and the stream drains, so the host
    // function never reads a gate that is gone.
    struct OpenOnExit {
      Gate& gate;
      cudaStream_t stream;
      ~OpenOnExit() {
        gate.open.store(true, std::memory_order_release);
        cudaStreamSynchronize(stream);
      }
    } open_on_exit{gate, stream};
    SMLA_CLI_CUDA(cudaLaunchHostFunc(stream, wait_at_gate, &gate));
    if (res.flush() != nullptr) {
      // A different byte each run: the writes cannot be elided as a repeat of the last fill.
      SMLA_CLI_CUDA(cudaMemsetAsync(res.flush(), i & 0xff, res.flush_bytes(), stream));
    }
    SMLA_CLI_CUDA(cudaEventRecord(res.start(), stream));
    Status st = fn();
    gate.open.store(true, std::memory_order_release);
    SMLA_CLI_CUDA(cudaEventRecord(res.stop(), stream));
    SMLA_CLI_CUDA(cudaEventSynchronize(res.stop()));
    SMLA_RETURN_IF_ERROR(st);
    if (gate.timed_out.load()) {
      return unsupported(
          "isolated timing: the call synchronised the device while its launches were held "
          "behind the timing gate; its device time cannot be separated from its host time");
    }
    float ms = 0.0f;
    SMLA_CLI_CUDA(cudaEventElapsedTime(&ms, res.start(), res.stop()));
    device_ms->push_back(ms);
  }
  return {};
}

#endif  // SMLA_WITH_CUDA

}  // namespace

Status time_isolated_calls(Device device, const std::function<Status()>& fn, int warmup,
                           int iterations, bool flush_l2, std::vector<double>* host_ms,
                           std::vector<double>* device_ms) {
  if (host_ms == nullptr || device_ms == nullptr) {
    return invalid_argument("time_isolated_calls: output vectors are null");
  }
  if (iterations < 1) {
    return invalid_argument("time_isolated_calls: iterations = " + std::to_string(iterations) +
                            " must be >= 1");
  }
  host_ms->clear();
  device_ms->clear();
  if (!device.is_cuda()) return time_host_calls(fn, warmup, iterations, host_ms, device_ms);
#if defined(SMLA_WITH_CUDA)
  return time_cuda_calls(device.index, fn, warmup, iterations, flush_l2, host_ms, device_ms);
#else
  return unsupported("time_isolated_calls: this build has no CUDA support");
#endif
}

}  // namespace sparse_mla::cli
