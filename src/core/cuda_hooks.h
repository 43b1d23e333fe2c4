// The CUDA runtime services the host-only core needs, implemented in src/cuda/runtime/ when the
// build has CUDA and in no_cuda.cpp otherwise. Keeps cuda_runtime.h out of src/core.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "sparse_mla/runtime.h"

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

}  // namespace sparse_mla::detail
