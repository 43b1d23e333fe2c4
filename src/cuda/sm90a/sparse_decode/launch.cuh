// The Hopper decode's launcher (launch.h), one explicit instantiation per cache format in
// src/cuda/instantiations/ (sm_90a only): the seesaw decode (kernel.cuh). The heads-in-N variant
// of 1..32 heads (598fec9) lost to the portable 16-row tile and to the padded seesaw and was
// removed (docs/kernels/sm90a_sparse_decode.md, v28).
#pragma once

#include <cuda_runtime.h>

#include "cuda/sm90a/sparse_decode/kernel.cuh"
#include "cuda/sm90a/sparse_decode/launch.h"

namespace sparse_mla::cuda::sm90a_decode {

template <KvCacheFormat kFormat, int kDqk>
int sm90a_decode_smem_bytes() {
  return kSeesawDecodeSmemBytes<kDqk>;
}

template <KvCacheFormat kFormat, int kDqk>
Status launch_sm90a_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  return launch_seesaw_decode<kFormat, kDqk>(launch, stream);
}

}  // namespace sparse_mla::cuda::sm90a_decode
