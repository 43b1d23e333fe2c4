// Device runtime services for tools and tests that must not include CUDA headers: device
// discovery, owned buffers, copies, and event timing with L2 flushing. Without CUDA in the build
// (or without a visible device) every CUDA call returns a kUnsupported Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sparse_mla/backend.h"
#include "sparse_mla/status.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int max_sm_clock_mhz = 0;
  int memory_clock_mhz = 0;
  int memory_bus_bits = 0;
};

int cuda_device_count();  // 0 without CUDA support or devices
Status get_device_info(int index, DeviceInfo* info);

// An owned allocation on one device (host memory for Device::cpu()). Move-only.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  static Status allocate(Device device, size_t bytes, Buffer* out);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
};

// Copies between any two of host and device memory (synchronous).
Status copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
Status fill_bytes(void* dst, Device device, int value, size_t bytes);
Status synchronize(Device device);

// Runs `fn` `warmup` times, then `iterations` times, each timed on `device` (CUDA events on
// `stream`, or the steady clock on the CPU), flushing the L2 cache before each timed run when
// `flush_l2` is set (CUDA only). Fills `milliseconds` with one time per iteration.
Status time_runs(Device device, StreamHandle stream, const std::function<Status()>& fn, int warmup,
                 int iterations, bool flush_l2, std::vector<double>* milliseconds);

}  // namespace sparse_mla
