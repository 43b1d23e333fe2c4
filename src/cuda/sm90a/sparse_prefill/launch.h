// Host-side launcher of the Hopper (sm_90a) sparse prefill, one explicit instantiation per d_qk in
// src/cuda/instantiations/ (compiled for sm_90a only). Only those units include launch.cuh (the
// seesaw kernel.cuh, or at 1..32 heads with SMLA_PREFILL_SM90A_HEADS_IN_N=1 heads_in_n_kernel.cuh).
#pragma once

#include <cuda_runtime.h>

#include "core/params.h"
#include "sparse_mla/status.h"

namespace sparse_mla::cuda::sm90a_prefill {

// Dynamic shared memory the d_qk instantiation needs (the seesaw's plan, seesaw/config.cuh, the
// larger of its kernels' plans, plus 1 KiB of alignment slack).
template <int kDqk>
int sm90a_prefill_smem_bytes();

// Launches on `stream`; p is validated (core/validate). No host synchronisation. The caller has
// checked that the device is sm_90 and runs this library's sm_90a code.
template <int kDqk>
Status launch_sm90a_sparse_prefill(const detail::PrefillParams& p, cudaStream_t stream);

}  // namespace sparse_mla::cuda::sm90a_prefill
