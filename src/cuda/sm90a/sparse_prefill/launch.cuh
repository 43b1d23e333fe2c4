// The Hopper prefill's launcher (launch.h), one explicit instantiation per d_qk in
// src/cuda/instantiations/ (sm_90a only): the seesaw prefill (kernel.cuh) or, at 1..32 heads with
// SMLA_PREFILL_SM90A_HEADS_IN_N=1, the heads-in-N prefill (heads_in_n_kernel.cuh).
#pragma once

#include <cuda_runtime.h>

#include "cuda/knobs.h"
#include "cuda/sm90a/sparse_prefill/heads_in_n_kernel.cuh"
#include "cuda/sm90a/sparse_prefill/kernel.cuh"
#include "cuda/sm90a/sparse_prefill/launch.h"

namespace sparse_mla::cuda::sm90a_prefill {

// The seesaw's plan is the larger (sm90a/heads_in_n/config.cuh asserts it), so it sizes the
// instantiation's shared memory.
template <int kDqk>
int sm90a_prefill_smem_bytes() {
  return kSeesawPrefillSmemBytes<kDqk>;
}

template <int kDqk>
Status launch_sm90a_sparse_prefill(const detail::PrefillParams& p, cudaStream_t stream) {
  if (p.problem.h_q <= 32 && cuda_knobs().prefill_sm90a_heads_in_n.value.value_or(0) == 1) {
    return prefill_heads_in_n_for(p.problem.h_q) == 16
               ? launch_heads_in_n_prefill<kDqk, 16>(p, stream)
               : launch_heads_in_n_prefill<kDqk, 32>(p, stream);
  }
  return launch_seesaw_prefill<kDqk>(p, stream);
}

}  // namespace sparse_mla::cuda::sm90a_prefill
