// device_limits (device_limits.h): one slot per device index, filled under a mutex and read
// without one once filled (an acquire load of its flag), so a call costs one atomic load.
#include "cuda/runtime/device_limits.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>

namespace sparse_mla::cuda {
namespace {

bool query(int device, DeviceLimits* limits) {
  if (cudaDeviceGetAttribute(&limits->cc_major, cudaDevAttrComputeCapabilityMajor, device) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&limits->cc_minor, cudaDevAttrComputeCapabilityMinor, device) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&limits->sm_count, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&limits->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace

bool device_limits(int device, DeviceLimits* limits, std::string* why_not) {
  constexpr int kMaxDevices = 64;
  struct Slot {
    std::atomic<bool> known{false};
    DeviceLimits limits;
  };
  static std::array<Slot, kMaxDevices> slots;
  static std::mutex mutex;
  bool ok = true;
  if (device < 0 || device >= kMaxDevices) {
    ok = query(device, limits);
  } else if (Slot& slot = slots[device]; slot.known.load(std::memory_order_acquire)) {
    *limits = slot.limits;
  } else {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!slot.known.load(std::memory_order_relaxed)) {
      ok = query(device, &slot.limits);
      if (ok) slot.known.store(true, std::memory_order_release);
    }
    if (ok) *limits = slot.limits;
  }
  if (!ok) *why_not = "cannot query CUDA device " + std::to_string(device);
  return ok;
}

}  // namespace sparse_mla::cuda
