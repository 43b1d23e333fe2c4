// Slot -> (page, token of the page) without an integer division: one 32 x 32 -> 64-bit multiply
// and a shift. page = (slot * magic) >> shift with l = ceil(log2 page_size), shift = 31 + l and
// magic = ceil(2^shift / page_size) (< 2^32). With e = magic * page_size - 2^shift, 0 <= e <
// page_size <= 2^l, the quotient's error slot * e / (page_size 2^shift) stays under
// 1 / page_size for every slot < 2^31, so the floor is exact; validation caps a cache at 2^31
// slots (core/validate.cpp), which also bounds page_size by 2^31. Plain C++ apart from
// SMLA_HOST_DEVICE, so the CPU suite checks it (tests/cpp/cuda_codec_rules_test.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace sparse_mla::cuda {

struct PageDivider {
  uint32_t page_size, magic, shift;
  SMLA_HOST_DEVICE explicit PageDivider(uint32_t page_size_value)
      : page_size(page_size_value), magic(0), shift(31u + ceil_log2(page_size_value)) {
    magic = static_cast<uint32_t>(((uint64_t{1} << shift) + page_size - 1u) / page_size);
  }
  SMLA_HOST_DEVICE uint32_t page(uint32_t slot) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(slot) * magic) >> shift);
  }
  SMLA_HOST_DEVICE static uint32_t ceil_log2(uint32_t n) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < n) ++l;
    return l;
  }
};

}  // namespace sparse_mla::cuda
