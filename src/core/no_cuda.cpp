// Stand-ins for a build without CUDA: no devices, empty CUDA kernel tables, and a clear error
// from every CUDA runtime service.
#include <span>

#include "core/cuda_hooks.h"
#include "core/kernel_variant.h"

namespace sparse_mla::detail {
namespace {
Status built_without_cuda() {
  return unsupported(
      "this build of sparse-mla has no CUDA support (configured with "
      "SMLA_ENABLE_CUDA=OFF or without nvcc)");
}
}  // namespace

int cuda_device_count_impl() { return 0; }
Status cuda_device_info_impl(int, DeviceInfo*) { return built_without_cuda(); }
Status cuda_malloc_impl(int, size_t, void**) { return built_without_cuda(); }
void cuda_free_impl(int, void*) {}
Status cuda_copy_impl(void*, Device, const void*, Device, size_t) { return built_without_cuda(); }
Status cuda_fill_impl(void*, int, int, size_t) { return built_without_cuda(); }
Status cuda_synchronize_impl(int) { return built_without_cuda(); }
Status cuda_time_runs_impl(int, StreamHandle, const std::function<Status()>&, int, int, bool,
                           std::vector<double>*) {
  return built_without_cuda();
}

Status cuda_quantize_kv_cache_impl(const TensorView&, const KvCacheView&, StreamHandle) {
  return built_without_cuda();
}
Status cuda_dequantize_kv_cache_impl(const KvCacheView&, const TensorView&, StreamHandle) {
  return built_without_cuda();
}
Status cuda_write_kv_cache_impl(const TensorView&, const TensorView&, const KvCacheView&,
                                StreamHandle) {
  return built_without_cuda();
}

std::span<const PrefillKernel> cuda_prefill_kernels() { return {}; }
std::span<const DecodeKernel> cuda_decode_kernels() { return {}; }

}  // namespace sparse_mla::detail
