// The Hopper decode's launcher (launch.h), one explicit instantiation per cache format in
// src/cuda/instantiations/ (sm_90a only): the seesaw decode (kernel.cuh) or, at 1..32 heads with
// SMLA_DECODE_SM90A_HEADS_IN_N=1, the heads-in-N decode (heads_in_n_kernel.cuh). Both take the
// same plan: the split schedule of 64-key blocks over parts x head groups of 64 rows (one group at
// 1..32 heads).
#pragma once

#include <cuda_runtime.h>

#include "cuda/knobs.h"
#include "cuda/sm90a/sparse_decode/heads_in_n_kernel.cuh"
#include "cuda/sm90a/sparse_decode/kernel.cuh"
#include "cuda/sm90a/sparse_decode/launch.h"

namespace sparse_mla::cuda::sm90a_decode {

// The seesaw's plan is the larger (sm90a/heads_in_n/config.cuh asserts it), so it sizes the
// instantiation's shared memory.
template <KvCacheFormat kFormat, int kDqk>
int sm90a_decode_smem_bytes() {
  return kSeesawDecodeSmemBytes<kDqk>;
}

template <KvCacheFormat kFormat, int kDqk>
Status launch_sm90a_sparse_decode(const DecodeLaunch& launch, cudaStream_t stream) {
  if (launch.p.problem.h_q <= 32 && cuda_knobs().decode_sm90a_heads_in_n.value.value_or(0) == 1) {
    return heads_in_n_for(launch.p.problem.h_q) == 16
               ? launch_heads_in_n_decode<kFormat, kDqk, 16>(launch, stream)
               : launch_heads_in_n_decode<kFormat, kDqk, 32>(launch, stream);
  }
  return launch_seesaw_decode<kFormat, kDqk>(launch, stream);
}

}  // namespace sparse_mla::cuda::sm90a_decode
