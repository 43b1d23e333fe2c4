// The registry arrays (kernel_registry.h): generated into the build folder from the kernel table
// (cmake/kernels.cmake runs src/cuda/instantiations/generate.py), so they always hold exactly
// the instantiations this build compiles.
#include "cuda/kernel_registry.h"

#include <cstring>

#include "kernels/kernel_entries.inc"

namespace sparse_mla::cuda {

std::span<const PrefillEntry> portable_prefill_entries() { return kPortablePrefillEntries; }
std::span<const Sm90aPrefillEntry> sm90a_prefill_entries() { return kSm90aPrefillEntries; }
std::span<const DecodeEntry> portable_decode_entries() { return kPortableDecodeEntries; }
std::span<const Sm90aDecodeEntry> sm90a_decode_entries() { return kSm90aDecodeEntries; }
std::span<const AbsentKernel> absent_kernels() { return kAbsentKernels; }

const char* why_not_built(const char* family, KvCacheFormat format, int64_t d_qk) {
  for (const AbsentKernel& k : kAbsentKernels) {
    if (std::strcmp(k.family, family) == 0 && k.format == format && k.d_qk == d_qk) return k.why;
  }
  return nullptr;
}

}  // namespace sparse_mla::cuda
