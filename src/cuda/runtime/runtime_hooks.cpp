// The CUDA runtime services of core/cuda_hooks.h: device discovery and properties, allocations,
// synchronous copies and fills, and event timing with an L2 flush before each timed run.
// Every call makes the target device current only for its own duration (DeviceGuard).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_hooks.h"
#include "cuda/runtime/cuda_check.h"
#include "cuda/runtime/device_guard.h"

namespace sparse_mla::detail {
namespace {

using cuda::DeviceGuard;

// Flush buffer of one device: written before each timed run so the run starts with an L2 holding
// none of its inputs. Allocated on first use and kept for the life of the process (freeing it in a
// static destructor would race the CUDA runtime's own teardown).
struct FlushBuffer {
  void* data = nullptr;
  size_t bytes = 0;
};

Status l2_flush_buffer(int device, FlushBuffer* out) {
  static std::mutex mutex;
  static std::vector<FlushBuffer> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<size_t>(device) >= buffers.size()) buffers.resize(device + 1);
  FlushBuffer& buffer = buffers[device];
  if (buffer.data == nullptr) {
    int l2_bytes = 0;
    SMLA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    // 2x the L2 size (docs/flashmla_baseline.md): writing that much leaves no line of the previous
    // run; the 64 MiB floor covers devices that report no L2 size.
    size_t bytes = std::max<size_t>(2 * static_cast<size_t>(l2_bytes), size_t{64} << 20);
    SMLA_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer.data, bytes));
    buffer.bytes = bytes;
  }
  *out = buffer;
  return {};
}

// Owns a set of events; destroys them on every return path.
class Events {
 public:
  ~Events() {
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
  }
  Status create(size_t count) {
    events_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      cudaEvent_t event;
      SMLA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
      events_.push_back(event);
    }
    return {};
  }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace

int cuda_device_count_impl() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error of any later call
    return 0;
  }
  return count;
}

Status cuda_device_info_impl(int index, DeviceInfo* info) {
  int count = cuda_device_count_impl();
  if (index < 0 || index >= count) {
    return invalid_argument("get_device_info: device index " + std::to_string(index) +
                            " is out of range [0, " + std::to_string(count) + ")");
  }
  cudaDeviceProp prop;
  SMLA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index));
  info->index = index;
  info->name = prop.name;
  info->sm_count = prop.multiProcessorCount;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info->l2_bytes = prop.l2CacheSize;
  int sm_khz = 0, memory_khz = 0, bus_bits = 0;
  SMLA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, index));
  SMLA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, index));
  SMLA_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index));
  info->max_sm_clock_mhz = sm_khz / 1000;
  info->memory_clock_mhz = memory_khz / 1000;
  info->memory_bus_bits = bus_bits;
  return {};
}

Status cuda_malloc_impl(int device, size_t bytes, void** ptr) {
  DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(device));
  cudaError_t error = cudaMalloc(ptr, bytes);
  if (error != cudaSuccess) {
    *ptr = nullptr;
    return cuda::cuda_error_status(
        ("cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device))
            .c_str(),
        error);
  }
  return {};
}

void cuda_free_impl(int device, void* ptr) {
  DeviceGuard guard;
  if (!guard.enter(device).ok()) return;
  cudaFree(ptr);
}

// Copies and fills go through the legacy default stream and wait for it, so they are ordered
// after earlier work of blocking streams and complete before returning (cudaMemcpy alone returns
// early for device-to-device copies).
Status cuda_copy_impl(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t bytes) {
  DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(dst_device.is_cuda() ? dst_device.index : src_device.index));
  SMLA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamLegacy));
  SMLA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy));
  return {};
}

Status cuda_fill_impl(void* dst, int device, int value, size_t bytes) {
  DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(device));
  SMLA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, bytes, cudaStreamLegacy));
  SMLA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy));
  return {};
}

Status cuda_synchronize_impl(int device) {
  DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(device));
  SMLA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return {};
}

Status cuda_time_runs_impl(int device, StreamHandle stream_handle,
                           const std::function<Status()>& fn, int warmup, int iterations,
                           bool flush_l2, std::vector<double>* milliseconds) {
  DeviceGuard guard;
  SMLA_RETURN_IF_ERROR(guard.enter(device));
  auto stream = static_cast<cudaStream_t>(stream_handle);
  FlushBuffer flush;
  if (flush_l2) SMLA_RETURN_IF_ERROR(l2_flush_buffer(device, &flush));
  for (int i = 0; i < warmup; ++i) SMLA_RETURN_IF_ERROR(fn());

  Events events;  // start of run i at 2i, its end at 2i+1
  SMLA_RETURN_IF_ERROR(events.create(2 * static_cast<size_t>(iterations)));
  for (int i = 0; i < iterations; ++i) {
    if (flush_l2) {
      // A different byte each run: the writes cannot be elided as a repeat of the last fill.
      SMLA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush.data, i & 0xff, flush.bytes, stream));
    }
    SMLA_CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * i], stream));
    SMLA_RETURN_IF_ERROR(fn());
    SMLA_CUDA_RETURN_IF_ERROR(cudaEventRecord(events[2 * i + 1], stream));
  }
  SMLA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events[2 * iterations - 1]));
  milliseconds->clear();
  for (int i = 0; i < iterations; ++i) {
    float ms = 0.0f;
    SMLA_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    milliseconds->push_back(ms);
  }
  return {};
}

}  // namespace sparse_mla::detail
