// The CUDA runtime services the host-only core needs, implemented in src/cuda/runtime/ when the
// build has CUDA and in no_cuda.cpp otherwise. Keeps cuda_runtime.h out of src/core.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "sparse_mla/kv_cache_format.h"
#include "sparse_mla/runtime.h"
#include "sparse_mla/tensor_view.h"

namespace sparse_mla::detail {

int cuda_device_count_impl();
Status cuda_device_info_impl(int index, DeviceInfo* info);
Status cuda_malloc_impl(int device, size_t bytes, void** ptr);
void cuda_free_impl(int device, void* ptr);
// Synchronous copy; kinds are derived from the two devices.
Status cuda_copy_impl(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t bytes);
Status cuda_fill_impl(void* dst, int device, int value, size_t bytes);
Status cuda_synchronize_impl(int device);
Status cuda_time_runs_impl(int device, StreamHandle stream, const std::function<Status()>& fn,
                           int warmup, int iterations, bool flush_l2,
                           std::vector<double>* milliseconds);

// The device codec (src/cuda/codec/): arguments validated by the caller (kv_cache_codec.h rules),
// every pointer on cache.device; each is kernels on `stream`, no allocation, no synchronisation.
Status cuda_quantize_kv_cache_impl(const TensorView& kv_bf16, const KvCacheView& cache,
                                   StreamHandle stream);
Status cuda_dequantize_kv_cache_impl(const KvCacheView& cache, const TensorView& kv_out,
                                     StreamHandle stream);
Status cuda_write_kv_cache_impl(const TensorView& rows, const TensorView& slot_mapping,
                                const KvCacheView& cache, StreamHandle stream);

}  // namespace sparse_mla::detail
