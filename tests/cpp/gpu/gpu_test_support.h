// Shared pieces of the GPU tests (label `gpu`): the skip for machines without a CUDA device (CI has
// none), and typed device arrays over the public runtime API, so that a test file needs CUDA
// headers only for what it launches itself.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "sparse_mla/runtime.h"

// Ends the current test as skipped when this build has no CUDA or no device is visible.
#define SMLA_SKIP_WITHOUT_GPU()                                                           \
  do {                                                                                    \
    if (!::sparse_mla::cuda_available()) {                                                \
      GTEST_SKIP() << "no CUDA device visible (or built without CUDA): GPU test skipped"; \
    }                                                                                     \
  } while (0)

// Fails the current test (fatally) with the Status message when `expr` is not ok.
#define SMLA_ASSERT_OK(expr)                                            \
  do {                                                                  \
    ::sparse_mla::Status smla_test_status_ = (expr);                    \
    ASSERT_TRUE(smla_test_status_.ok()) << smla_test_status_.message(); \
  } while (0)

namespace sparse_mla::test_support {

inline constexpr Device kGpu{DeviceType::kCuda, 0};

// Copies a host vector into a new device buffer.
template <typename T>
Status to_device(const std::vector<T>& host, Buffer* out) {
  SMLA_RETURN_IF_ERROR(Buffer::allocate(kGpu, host.size() * sizeof(T), out));
  return copy_bytes(out->data(), kGpu, host.data(), Device::cpu(), host.size() * sizeof(T));
}

// Copies `count` elements from device memory into a host vector.
template <typename T>
Status to_host(const void* device_ptr, size_t count, std::vector<T>* out) {
  out->resize(count);
  return copy_bytes(out->data(), Device::cpu(), device_ptr, kGpu, count * sizeof(T));
}

}  // namespace sparse_mla::test_support
