// The Hopper decode's launcher (launch.h), one explicit instantiation per cache format in
// src/cuda/instantiations/ (sm_90a only): the seesaw decode (kernel.cuh) or, for an FP8 cache
// with SMLA_DECODE_SM90A_BLOCK_SCHEDULE=1, the block schedule (block_kernel.cuh). Both take the
// same plan: the split schedule of 64-key blocks, parts x head groups of 64 rows.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/knobs.h"
#include "cuda/sm90a/sparse_decode/block_kernel.cuh"
#include "cuda/sm90a/sparse_decode/kernel.cuh"
#include "cuda/sm90a/sparse_decode/launch.h"

namespace sparse_mla::cuda::sm90a_decode {

template <KvCacheFormat kFormat, int kDqk>
int sm90a_decode_smem_bytes() {
  return std::max(
      kSeesawDecodeSmemBytes<kFormat, kDqk>,
      kFormat == KvCacheFormat::kBf16 ? 0 : sm90a_block_decode::kBlockDecodeSmemBytes<kDqk>);
}

template <KvCacheFormat kFormat, int kDqk>
Status launch_sm90a_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  if constexpr (kFormat != KvCacheFormat::kBf16) {
    if (cuda_knobs().decode_sm90a_block_schedule.value.value_or(0) == 1) {
      return sm90a_block_decode::launch_sm90a_block_decode<kFormat, kDqk>(launch, stream);
    }
  }
  return launch_seesaw_decode<kFormat, kDqk>(launch, stream);
}

}  // namespace sparse_mla::cuda::sm90a_decode
