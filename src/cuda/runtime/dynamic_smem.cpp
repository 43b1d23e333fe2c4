// ensure_max_dynamic_smem and kernel_ptx_version (dynamic_smem.h): mutex-guarded records per
// (kernel, device). A lookup costs a lock and a map search per launch, against a runtime call
// that the launch would otherwise make each time.
#include "cuda/runtime/dynamic_smem.h"

#include <map>
#include <mutex>
#include <utility>

namespace sparse_mla::cuda {

cudaError_t ensure_max_dynamic_smem(const void* kernel, int bytes) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return error;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> limits;  // (kernel, device) -> bytes set
  std::lock_guard<std::mutex> lock(mutex);
  int& limit = limits[{kernel, device}];
  if (limit >= bytes) return cudaSuccess;
  error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (error == cudaSuccess) limit = bytes;
  return error;
}

cudaError_t kernel_ptx_version(const void* kernel, int* version) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return error;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> versions;  // (kernel, device) -> ptxVersion
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  if (const auto it = versions.find(key); it != versions.end()) {
    *version = it->second;
    return cudaSuccess;
  }
  cudaFuncAttributes attributes;
  error = cudaFuncGetAttributes(&attributes, kernel);
  if (error != cudaSuccess) return error;
  versions.emplace(key, attributes.ptxVersion);
  *version = attributes.ptxVersion;
  return cudaSuccess;
}

}  // namespace sparse_mla::cuda
