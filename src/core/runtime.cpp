// Host side of the runtime API (runtime.h): host buffers and timing directly, CUDA work through
// the hooks of cuda_hooks.h.
#include "sparse_mla/runtime.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/cuda_hooks.h"

namespace sparse_mla {

// Counted once per process: the CUDA runtime fixes the visible devices when it starts
// (CUDA_VISIBLE_DEVICES is read then), and every CUDA call's dispatch asks.
int cuda_device_count() {
  static const int count = detail::cuda_device_count_impl();
  return count;
}
bool cuda_available() { return cuda_device_count() > 0; }

Status get_device_info(int index, DeviceInfo* info) {
  if (info == nullptr) return invalid_argument("get_device_info: info is null");
  return detail::cuda_device_info_impl(index, info);
}

Buffer::~Buffer() { release(); }
Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}
Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (data_ == nullptr) return;
  if (device_.is_cuda()) {
    detail::cuda_free_impl(device_.index, data_);
  } else {
    ::operator delete (data_, std::align_val_t{256});
  }
  data_ = nullptr;
  bytes_ = 0;
}

Status Buffer::allocate(Device device, size_t bytes, Buffer* out) {
  if (out == nullptr) return invalid_argument("Buffer::allocate: out is null");
  out->release();
  out->device_ = device;
  size_t request = bytes == 0 ? 1 : bytes;  // a valid, unique pointer even for empty buffers
  if (device.is_cuda()) {
    SMLA_RETURN_IF_ERROR(detail::cuda_malloc_impl(device.index, request, &out->data_));
  } else {
    out->data_ = ::operator new (request, std::align_val_t{256}, std::nothrow);
    if (out->data_ == nullptr) {
      return {StatusCode::kDeviceError,
              "Buffer::allocate: out of host memory for " + std::to_string(bytes) + " bytes"};
    }
  }
  out->bytes_ = bytes;
  return {};
}

Status copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return {};
  if (dst == nullptr || src == nullptr) return invalid_argument("copy_bytes: null pointer");
  if (!dst_device.is_cuda() && !src_device.is_cuda()) {
    std::memcpy(dst, src, bytes);
    return {};
  }
  return detail::cuda_copy_impl(dst, dst_device, src, src_device, bytes);
}

Status fill_bytes(void* dst, Device device, int value, size_t bytes) {
  if (bytes == 0) return {};
  if (dst == nullptr) return invalid_argument("fill_bytes: dst is null");
  if (!device.is_cuda()) {
    std::memset(dst, value, bytes);
    return {};
  }
  return detail::cuda_fill_impl(dst, device.index, value, bytes);
}

Status synchronize(Device device) {
  return device.is_cuda() ? detail::cuda_synchronize_impl(device.index) : Status{};
}

Status time_runs(Device device, StreamHandle stream, const std::function<Status()>& fn, int warmup,
                 int iterations, bool flush_l2, std::vector<double>* milliseconds) {
  if (milliseconds == nullptr) return invalid_argument("time_runs: milliseconds is null");
  if (iterations < 1) {
    return invalid_argument("time_runs: iterations = " + std::to_string(iterations) +
                            " must be >= 1");
  }
  if (device.is_cuda()) {
    return detail::cuda_time_runs_impl(device.index, stream, fn, warmup, iterations, flush_l2,
                                       milliseconds);
  }
  milliseconds->clear();
  for (int i = 0; i < warmup; ++i) SMLA_RETURN_IF_ERROR(fn());
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    SMLA_RETURN_IF_ERROR(fn());
    auto stop = std::chrono::steady_clock::now();
    milliseconds->push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return {};
}

}  // namespace sparse_mla
