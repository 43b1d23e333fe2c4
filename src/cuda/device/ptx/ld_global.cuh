// Read-only global loads straight into registers for gathered KV rows (the warp-specialised
// decode's producers): non-coherent (.nc: the cache is not written during the call), not kept in
// L1 (each row is read once per block), with a 256-B L2 prefetch hint (whole rows are read, as the
// cp.async gathers' hint).
#pragma once

#include <cstdint>

namespace sparse_mla::cuda::ptx {

__device__ __forceinline__ uint2 ld_global_nc_v2(const void* ptr) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(v.x), "=r"(v.y)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ uint4 ld_global_nc_v4(const void* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ float ld_global_nc_f32(const void* ptr) {
  float v;
  asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];\n" : "=f"(v) : "l"(ptr));
  return v;
}

}  // namespace sparse_mla::cuda::ptx
