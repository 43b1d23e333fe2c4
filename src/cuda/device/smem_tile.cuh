// Shared-memory layout of every bf16 tile the portable kernels feed to ldmatrix: a [rows][dims]
// tile stored as panels of 64 dims (panel p = [rows][64], 128-B rows), the 16-B chunks of each
// row XOR-swizzled by (row % 8) so that the 8 row addresses of one ldmatrix phase hit 8 distinct
// bank groups (cuda-techniques.md §1; same bytes as the TMA/wgmma SWIZZLE_128B layout).
#pragma once

#include <cstdint>

namespace sparse_mla::cuda {

// Byte offset of 16-B chunk `chunk` (dims 8*chunk .. 8*chunk+7) of row `row`.
template <int kRows>
__device__ __forceinline__ uint32_t tile_chunk_offset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * (kRows * 128) + row * 128 +
                               (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace sparse_mla::cuda
