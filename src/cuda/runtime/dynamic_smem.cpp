// ensure_max_dynamic_smem (dynamic_smem.h): a mutex-guarded record of the limit set per
// (kernel, device). The lookup costs a lock and a map search per launch, against a runtime call
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

}  // namespace sparse_mla::cuda
