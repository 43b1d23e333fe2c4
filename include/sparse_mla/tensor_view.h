// TensorView: a non-owning view of a strided tensor in host or device memory.
// Sizes and strides are in elements (not bytes), like torch. Rank is at most 4 — every tensor
// of this library's API fits. The library never allocates or frees what a view points to.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "sparse_mla/dtype.h"

namespace sparse_mla {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  friend bool operator==(const Device&, const Device&) = default;
};

std::string to_string(const Device& device);

inline constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kBFloat16;
  int rank = 0;
  std::array<int64_t, kMaxRank> sizes{};
  std::array<int64_t, kMaxRank> strides{};  // elements
  Device device{};

  // A row-major (contiguous) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                               Device device = Device::cpu());
  // A view with explicit element strides (same length as sizes).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> sizes,
                            std::initializer_list<int64_t> strides, Device device = Device::cpu());

  int64_t size(int dim) const { return sizes[dim]; }
  int64_t stride(int dim) const { return strides[dim]; }
  int64_t numel() const;  // 0 if any size is 0; saturates at INT64_MAX instead of overflowing
  bool is_contiguous() const;
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data);
  }
};

// "[3, 64, 576] bf16 strides [36864, 576, 1] cpu" — used in error messages and logs.
std::string describe(const TensorView& t);

}  // namespace sparse_mla
